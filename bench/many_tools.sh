#!/bin/sh
# The tools on the many-utterance datasets of bench/many_utts.py (issue 28:
# linear with small constants): info --json, verify, stats --json and
# convert --compress zstd at 1M and 10M utterances, warm page cache, wall
# time and max RSS of each (one run; /usr/bin/time).
#   sh bench/many_tools.sh [DIR (/tmp/cxs-many)] [CTXSHARD (build/tools/ctxshard)]
DIR=${1:-/tmp/cxs-many}
X=${2:-build/tools/ctxshard}
T=$(mktemp -d)
for N in 1000000 10000000; do
  D=$DIR/many-$N
  [ -d "$D" ] || { echo "no $D (bench/many_utts.py --utts $N --build-only)"; continue; }
  $X warm "$D" --quiet
  for c in "info --json" "verify" "stats --json"; do
    /usr/bin/time -f "$N $c: %e s, max RSS %M KB" $X $c "$D" > /dev/null 2> "$T/err"
    tail -n 1 "$T/err"
  done
  /usr/bin/time -f "$N convert --compress zstd: %e s, max RSS %M KB" \
    $X convert "$D" "$T/conv" --compress zstd --quiet > /dev/null 2> "$T/err"
  tail -n 1 "$T/err"
  rm -rf "$T/conv"
done
rm -rf "$T"
