#!/bin/sh
# qserve_cold.sh - the frame loader over q8 against float32 of the same
# data when the float32 copy does not fit the page cache and q8 does: each
# run in a memory cgroup (v1 or v2) of LIMIT bytes, the dataset's files
# dropped from the page cache first (posix_fadvise DONTNEED on its files
# alone: the machine's other users keep theirs), two epochs in block order
# (qserve_bench cold), the second's samples/s, bytes read from storage
# and CPU seconds.  ROUNDS rounds, the two dtypes in turn; medians and the
# median of the rounds' ratios.  READ_BPS (optional, e.g. 50M) also
# throttles the cgroup's reads of the datasets' disk to that many bytes a
# second (blkio.throttle.read_bps_device in v1, io.max in v2): a network
# disk's rate rather than a local one's.  Needs root (the cgroups).
#
# usage: sudo bench/qserve_cold.sh QSERVE_BENCH F32_DATASET Q8_DATASET LIMIT MEMORY ROUNDS [READ_BPS]
#   e.g. build/bench/qserve_bench /data/qb/float32-3000-80 /data/qb/q8-3000-80 700M 256M 3 50M
set -eu
bench=$1 f32=$2 q8=$3 limit=$4 memory=$5 rounds=$6 bps=${7:-}
bytes() { numfmt --from=iec "$1"; }
# the disk under the datasets, MAJ:MIN (a whole disk: the throttle's key)
dev=$(stat -c '%Hd:%Ld' "$f32/manifest.cxs" 2>/dev/null || stat -c '%d' "$f32")
cgs=
if [ -d /sys/fs/cgroup/memory ]; then
  mem=/sys/fs/cgroup/memory/ctxshard-qserve-$$
  mkdir "$mem"
  bytes "$limit" > "$mem/memory.limit_in_bytes"
  cgs=$mem
  if [ -n "$bps" ]; then
    blk=/sys/fs/cgroup/blkio/ctxshard-qserve-$$
    mkdir "$blk"
    echo "$dev $(bytes "$bps")" > "$blk/blkio.throttle.read_bps_device"
    cgs="$cgs $blk"
  fi
else
  mem=/sys/fs/cgroup/ctxshard-qserve-$$
  mkdir "$mem"
  bytes "$limit" > "$mem/memory.max"
  [ -z "$bps" ] || echo "$dev rbps=$(bytes "$bps")" > "$mem/io.max"
  cgs=$mem
fi
trap 'for c in $cgs; do rmdir "$c" 2>/dev/null || true; done' EXIT
drop() { /usr/bin/python3 -c '
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)' "$1"; }
run() { # in the cgroups: this shell joins them, the benchmark inherits them
  drop "$1"
  sh -c 'for c in $1; do echo $$ > "$c/cgroup.procs"; done; shift; exec "$@"' sh "$cgs" \
    "$bench" cold "$1" 30 256 "$(bytes "$memory")"
}
f=""; q=""
i=0
while [ $i -lt "$rounds" ]; do
  if [ $((i % 2)) -eq 0 ]; then a=$(run "$f32"); b=$(run "$q8"); else b=$(run "$q8"); a=$(run "$f32"); fi
  f="$f $(echo "$a" | tr ' ' ,)"; q="$q $(echo "$b" | tr ' ' ,)"
  i=$((i + 1))
done
/usr/bin/python3 - "$f" "$q" "$limit" "$(du -sb "$f32" | cut -f1)" "$(du -sb "$q8" | cut -f1)" "$bps" <<'PY'
import statistics as st, sys, os
f = [[float(v) for v in x.split(",")] for x in sys.argv[1].split()]
q = [[float(v) for v in x.split(",")] for x in sys.argv[2].split()]
print(f"memory cgroup limit {sys.argv[3]}; reads throttled to {sys.argv[6] + '/s' if sys.argv[6] else 'none (the disk as it is)'}; "
      f"float32 dataset {int(sys.argv[4])/2**20:.0f} MiB, q8 {int(sys.argv[5])/2**20:.0f} MiB; "
      f"frame loader, block order, k=30, B=256, 1 thread, second epoch; {len(f)} rounds; load average {os.getloadavg()[0]:.2f}")
for name, r in (("float32", f), ("q8", q)):
    print(f"{name:8s} median {st.median(x[0] for x in r):10.0f} samples/s   runs {' '.join(f'{x[0]:.0f}' for x in r)};"
          f"   read from storage {st.median(x[1] for x in r) / 2**20:.0f} MiB, CPU {st.median(x[2] for x in r):.2f} s (medians)")
print(f"q8 / float32: {st.median([b[0] / a[0] for a, b in zip(f, q)]):.2f}x (median of the rounds' ratios; target >= 3x)")
PY
