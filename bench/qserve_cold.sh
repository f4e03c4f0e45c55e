#!/bin/sh
# qserve_cold.sh - the frame loader over q8 against float32 of the same
# data when the float32 copy does not fit the page cache and q8 does: each
# run in a memory cgroup (v1 or v2) of LIMIT bytes, the dataset's files
# dropped from the page cache first (posix_fadvise DONTNEED on its files
# alone: the machine's other users keep theirs), two epochs in block order
# (qserve_bench cold), the second's samples/s.  ROUNDS rounds, the two
# dtypes in turn; medians and the median of the rounds' ratios.  Needs
# root (the cgroup).
#
# usage: sudo bench/qserve_cold.sh QSERVE_BENCH F32_DATASET Q8_DATASET LIMIT MEMORY ROUNDS
#   e.g. build/bench/qserve_bench /data/qb/float32-3000-80 /data/qb/q8-3000-80 700M 256M 3
set -eu
bench=$1 f32=$2 q8=$3 limit=$4 memory=$5 rounds=$6
bytes() { numfmt --from=iec "$1"; }
cg=
if [ -d /sys/fs/cgroup/memory ]; then
  cg=/sys/fs/cgroup/memory/ctxshard-qserve-$$
  mkdir "$cg"
  bytes "$limit" > "$cg/memory.limit_in_bytes"
else
  cg=/sys/fs/cgroup/ctxshard-qserve-$$
  mkdir "$cg"
  bytes "$limit" > "$cg/memory.max"
fi
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
drop() { /usr/bin/python3 -c '
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)' "$1"; }
run() { # in the cgroup: this shell joins it, the benchmark inherits it
  drop "$1"
  sh -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' sh "$cg" "$bench" cold "$1" 30 256 "$(bytes "$memory")"
}
f=""; q=""
i=0
while [ $i -lt "$rounds" ]; do
  if [ $((i % 2)) -eq 0 ]; then a=$(run "$f32"); b=$(run "$q8"); else b=$(run "$q8"); a=$(run "$f32"); fi
  f="$f $a"; q="$q $b"
  i=$((i + 1))
done
/usr/bin/python3 - "$f" "$q" "$limit" "$(du -sb "$f32" | cut -f1)" "$(du -sb "$q8" | cut -f1)" <<'PY'
import statistics as st, sys, os
f = [float(x) for x in sys.argv[1].split()]; q = [float(x) for x in sys.argv[2].split()]
print(f"memory cgroup limit {sys.argv[3]}; float32 dataset {int(sys.argv[4])/2**20:.0f} MiB, q8 {int(sys.argv[5])/2**20:.0f} MiB; "
      f"frame loader, block order, k=30, B=256, 1 thread, second epoch; {len(f)} rounds; load average {os.getloadavg()[0]:.2f}")
print(f"float32  median {st.median(f):12.0f} samples/s   runs {' '.join(f'{x:.0f}' for x in f)}")
print(f"q8       median {st.median(q):12.0f} samples/s   runs {' '.join(f'{x:.0f}' for x in q)}")
print(f"q8 / float32: {st.median([b / a for a, b in zip(f, q)]):.2f}x (median of the rounds' ratios; target >= 3x)")
PY
