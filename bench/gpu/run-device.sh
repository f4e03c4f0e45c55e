#!/bin/bash
# bench/gpu/run-device.sh: the GPU checks in one run, on a machine with an
# NVIDIA GPU, from the repository root:
#
#   1. build with CUDA (meson -Dcuda=enabled);
#   2. `ctxshard gpu`: the device probe;
#   3. the test suites `cuda` (every mode against the CPU gather, bit for
#      bit; no leaked device memory) and `reader` (the emulated GPU loader
#      beside the CPU reader);
#   4. the `cuda` suite's program under compute-sanitizer: memcheck (with
#      leak check), racecheck and synccheck;
#   5. `ctxshard gpu --check` over a synthesised dataset in every mode;
#   6. the benchmark bench/gpu/bench_gpu.py (needs a CUDA build of PyTorch
#      in `python3`).
#
# usage: bench/gpu/run-device.sh [all|test|bench]   (default all)
# `test` is steps 1-5 (a few minutes), `bench` steps 1, 2 and 6; a build
# left by an earlier run is reused.
#
# Results go under $OUT (default ./gpu-results): log.txt, probe.json,
# tests.txt, sanitizer-*.txt, check.txt, bench.json, bench.md, summary.txt.
# Every step runs under a time limit and a failed step does not stop the
# others; the exit status is the number of failed steps.
#
# Environment: OUT; DEBS, a directory of .deb files from bench/gpu/deps.sh,
# unpacked into a private prefix when zstd/xxHash/Check headers are
# missing (default ./.debs); BENCH_ARGS, extra arguments for bench_gpu.py
# (default: 16,000 utterances, about 20M frames); SKIP_BENCH=1.
set -u
phase=${1:-all}
case $phase in all|test|bench) ;; *) echo "usage: $0 [all|test|bench]" >&2; exit 2 ;; esac
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-results}
mkdir -p "$OUT"
exec > >(tee "$OUT/log.txt") 2>&1
failed=0
step() { # step NAME SECONDS CMD...: run, time, record
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s)
    echo "=== $name"
    timeout "$limit" "$@"
    rc=$?
    echo "=== $name: exit $rc in $(( $(date +%s) - t0 )) s"
    echo "$name: exit $rc, $(( $(date +%s) - t0 )) s" >>"$OUT/summary.txt"
    [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || failed=$((failed + 1))
    return "$rc"
}
: >>"$OUT/summary.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
    --format=csv >"$OUT/nvidia-smi.txt" 2>&1 || true
nproc >>"$OUT/nvidia-smi.txt"

# Build dependencies: carried .deb files, unpacked (never installed) when
# pkg-config cannot find the libraries.
DEBS=${DEBS:-.debs}
if ! { command -v pkg-config >/dev/null && pkg-config --exists libzstd libxxhash check; }; then
    if [ -d "$DEBS" ]; then
        deps=/tmp/ctxshard-deps
        for f in "$DEBS"/*.deb; do dpkg-deb -x "$f" "$deps"; done
        export PKG_CONFIG="$deps/usr/bin/pkgconf"
        export PKG_CONFIG_LIBDIR="$deps/usr/lib/x86_64-linux-gnu/pkgconfig:$deps/usr/share/pkgconfig"
        export PKG_CONFIG_SYSROOT_DIR="$deps"
        export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        echo "build dependencies unpacked from $DEBS into $deps"
    else
        echo "zstd/xxHash/Check not found and no $DEBS directory (bench/gpu/deps.sh makes one)"
    fi
fi
export PATH="$PATH:/usr/local/cuda/bin"

step build 300 sh -c '{ [ -f build-gpu/build.ninja ] || meson setup build-gpu -Dcuda=enabled \
    -Dbuildtype=release >/dev/null; } && ninja -C build-gpu >/dev/null' || { echo "build failed"; exit 99; }
exe=build-gpu/tools/ctxshard
step probe 60 sh -c "$exe gpu --json >'$OUT/probe.json'; $exe gpu"

if [ "$phase" != bench ]; then
step tests 600 sh -c "meson test -C build-gpu --suite cuda --suite reader --print-errorlogs \
    >'$OUT/tests.txt' 2>&1; rc=\$?; tail -20 '$OUT/tests.txt'; grep -A40 'cuda / cuda' \
    build-gpu/meson-logs/testlog.txt | head -60 >>'$OUT/tests.txt'; exit \$rc"

san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
    extra="" quick=1
    [ "$tool" = memcheck ] && extra="--leak-check full" quick=0
    step "sanitizer-$tool" 240 sh -c "CXS_GPU_TEST_QUICK=$quick CK_FORK=no $san --tool $tool $extra --error-exitcode 9 \
        build-gpu/tests/gpu/gpu_test $exe cuda >'$OUT/sanitizer-$tool.txt' 2>&1; rc=\$?; \
        tail -15 '$OUT/sanitizer-$tool.txt'; exit \$rc"
done

data=/tmp/ctxshard-gpu-check
rm -rf "$data"
step check 300 sh -c "$exe synth $data/raw --utts 400 --seed 3 --quiet \
    && $exe pack $data/raw $data/f16 --dtype f16 --guard 8 --shard-size 8M --quiet \
    && $exe pack $data/raw $data/z --compress zstd --quiet \
    && for ds in f16 z; do for m in stream resident pool; do \
         $exe gpu $data/\$ds --mode \$m --check --normalize --budget 60M --batch 4096 || exit 1; \
       done; done >'$OUT/check.txt' 2>&1; rc=\$?; tail -12 '$OUT/check.txt'; exit \$rc"

fi

if [ "$phase" != test ] && [ "${SKIP_BENCH:-0}" != 1 ]; then
    step bench 540 python3 bench/gpu/bench_gpu.py --build build-gpu --json "$OUT/bench.json" \
        --markdown "$OUT/bench.md" ${BENCH_ARGS:-}
fi
echo "failed steps: $failed"
cat "$OUT/summary.txt"
exit "$failed"
