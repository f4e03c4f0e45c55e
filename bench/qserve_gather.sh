#!/bin/sh
# qserve_gather.sh - the gather alone (qserve_bench gather: CPU ns a
# window, warm, 1 thread, shuffle / block / sequential) against two builds
# of the library, the same benchmark binary run with each in turn,
# RUNS runs each (A first in odd runs, B first in even ones), then the
# load average.
#
# usage: bench/qserve_gather.sh QSERVE_BENCH LIBDIR_A LIBDIR_B RUNS DATASET...
#   e.g. bench/qserve_gather.sh build/bench/qserve_bench ../before/build/lib build/lib 3 \
#          QB/float32-600-80 QB/q8-600-80
set -eu
bench=$1 a=$2 b=$3 runs=$4
shift 4
one() { LD_LIBRARY_PATH=$1 "$bench" gather "$2" 30 1024 20 3 | sed "s|^|$1 |"; }
i=0
while [ $i -lt "$runs" ]; do
  for ds in "$@"; do
    if [ $((i % 2)) -eq 0 ]; then one "$a" "$ds"; one "$b" "$ds"; else one "$b" "$ds"; one "$a" "$ds"; fi
  done
  i=$((i + 1))
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
