#!/bin/sh
# The tools on the many-utterance datasets of bench/many_utts.py (issue 28:
# linear with small constants): info --json, verify, stats --json and
# convert --compress zstd at 1M and 10M utterances, warm page cache, wall
# time and max RSS of each (one run; /usr/bin/time).  Then merge: the same
# N utterances (8 frames x 4, guard 4) written as 3 parts of one shard
# each by bench/writer_bench (cxs_writer_opts.part), joined by `ctxshard
# merge` into OUT beside them (the shards hard-linked, the usual case)
# and, when COPY_DIR (default /dev/shm) is another filesystem with room,
# into COPY_DIR (every shard copied); the parts' writing time is printed
# too.
#   sh bench/many_tools.sh [DIR (/tmp/cxs-many)] [CTXSHARD (build/tools/ctxshard)]
#                          [WRITER_BENCH (build/bench/writer_bench)] [COPY_DIR (/dev/shm)]
DIR=${1:-/tmp/cxs-many}
X=${2:-build/tools/ctxshard}
WB=${3:-build/bench/writer_bench}
COPY_DIR=${4:-/dev/shm}
T=$(mktemp -d)
for N in 1000000 10000000; do
  D=$DIR/many-$N
  if [ -d "$D" ]; then
    $X warm "$D" --quiet
    for c in "info --json" "verify" "stats --json"; do
      /usr/bin/time -f "$N $c: %e s, max RSS %M KB" $X $c "$D" > /dev/null 2> "$T/err"
      tail -n 1 "$T/err"
    done
    /usr/bin/time -f "$N convert --compress zstd: %e s, max RSS %M KB" \
      $X convert "$D" "$T/conv" --compress zstd --quiet > /dev/null 2> "$T/err"
    tail -n 1 "$T/err"
    rm -rf "$T/conv"
  else
    echo "no $D (bench/many_utts.py --utts $N --build-only): info, verify, stats, convert skipped"
  fi
  for i in 1 2 3; do
    $WB "$T/part$i" $N part $i 3 > "$T/wb" || exit 1
    echo "$N part $i/3 written: $(cut -d' ' -f1 "$T/wb") s"
  done
  cat "$T"/part*/shard-* > /dev/null # warm
  /usr/bin/time -f "$N merge (3 parts, shards linked): %e s, max RSS %M KB" \
    $X merge "$T/part1" "$T/part2" "$T/part3" "$T/merged" > /dev/null 2> "$T/err"
  tail -n 1 "$T/err"
  $X info "$T/merged" | grep -q "utterances *$N " || echo "merged dataset: wrong count"
  rm -rf "$T/merged"
  need=$(du -sk "$T"/part1 "$T"/part2 "$T"/part3 | awk '{s += $1} END {print s}')
  if [ -d "$COPY_DIR" ] && [ "$(stat -f -c %i "$COPY_DIR")" != "$(stat -f -c %i "$T")" ] &&
     [ "$(df -Pk "$COPY_DIR" | awk 'NR == 2 {print $4}')" -gt $((need * 2)) ]; then
    C=$(mktemp -d "$COPY_DIR/many-merge-XXXXXX")
    /usr/bin/time -f "$N merge (3 parts, shards copied to $COPY_DIR): %e s, max RSS %M KB" \
      $X merge "$T/part1" "$T/part2" "$T/part3" "$C/merged" > /dev/null 2> "$T/err"
    tail -n 1 "$T/err"
    rm -rf "$C"
  fi
  rm -rf "$T"/part1 "$T"/part2 "$T"/part3
done
rm -rf "$T"
