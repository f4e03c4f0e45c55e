#!/bin/bash
# bench/gpu/run-device.sh: the GPU checks in one run, on a machine with an
# NVIDIA GPU, from the repository root.
#
# usage: bench/gpu/run-device.sh [test|bench|all]   (default test)
#
# test (fits 5 minutes):
#   1. build with CUDA (meson -Dcuda=enabled) in build-gpu, afresh unless
#      build-gpu was configured by this script on this machine with the
#      same dependencies;
#   2. `ctxshard gpu --json`: the device probe (GPUDirect Storage included);
#   3. the cuda test program alone (every mode against the CPU gather, bit
#      for bit, resident mode once through GPUDirect Storage when libcufile
#      is found; the whole-utterance loader against the CPU utterance
#      loader, bit for bit; no leaked device memory): a skip (exit 77)
#      fails the step;
#   4. the same program under compute-sanitizer memcheck (leak check,
#      CXS_GPU_TEST_QUICK=1: one test per mode and the utterance loader's,
#      handled API errors not counted); then racecheck
#      and synccheck only while time remains, and skipped, not failed,
#      where the device refuses them;
#   5. `ctxshard gpu --check` over a synthesised dataset in every mode, with
#      budgets sized from the data (k=30, B=1024);
#   6. the emulated GPU loader (suite reader's gpu-emulated test).
# bench (fits 4 minutes): steps 1, 2 and bench/gpu/bench_gpu.py --quick
#   (BENCH_ARGS replaces --quick), rows written as each finishes.
# all: test then bench (fits 9 minutes).
#
# Every step runs on its own timer, cut to what is left of the phase's
# budget (BUDGET seconds: test 300, bench 240, all 540); a failed step does
# not stop the others; the exit status is the number of failed steps.
#
# Results under $OUT (default ./gpu-results), at most 8 files:
#   summary.txt      one line a step: exit status, seconds, or why skipped
#   log.txt          everything printed
#   details.tar.gz   the steps' own outputs (build log, probe, test and
#                    sanitizer logs, check output), re-made after each step
#   bench.jsonl      bench rows, one JSON line each as it finishes
#   bench.json, bench.md   the bench summary, rewritten after each row
#
# Environment: OUT; BUDGET; DEBS, .deb files from `bench/gpu/deps.sh DIR`
# (default ./.debs), unpacked into a private prefix when pkg-config does not
# find zstd/xxHash/Check; CXS_CUFILE, the path of libcufile.so.0 (default:
# found in the nvidia-cufile Python package of the python3 on PATH);
# BENCH_ARGS.
set -u
phase=${1:-test}
case $phase in
test) budget=${BUDGET:-300} ;;
bench) budget=${BUDGET:-240} ;;
all) budget=${BUDGET:-540} ;;
*) echo "usage: $0 [test|bench|all]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
OUT=${OUT:-$root/gpu-results}
mkdir -p "$OUT"
t_start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/ctxshard-gpu-run.XXXXXX")
exec > >(tee -a "$OUT/log.txt") 2>&1
echo "run-device.sh $phase: budget $budget s, details in $work, bundled into $OUT/details.tar.gz"
failed=0

left() { echo $((t_start + budget - $(date +%s))); }
bundle() { tar -czf "$OUT/details.tar.gz.tmp" -C "$work" . 2>/dev/null &&
    mv "$OUT/details.tar.gz.tmp" "$OUT/details.tar.gz"; }
note() { echo "$*" >>"$OUT/summary.txt"; }

# step [-o] NAME LIMIT CMD...: run CMD on a timer of LIMIT seconds, cut to
# what is left of the budget (less 15 s to bundle the results).  -o: an
# optional step, skipped when fewer than LIMIT/2 seconds are left; a
# required step with under 10 s left fails as "no time".  Exit 77 fails.
step() {
    local opt=0 name limit avail t0 rc
    [ "$1" = -o ] && { opt=1; shift; }
    name=$1 limit=$2
    shift 2
    avail=$(($(left) - 15))
    if { [ $opt = 1 ] && [ "$avail" -lt $((limit / 2)) ]; } || [ "$avail" -lt 10 ]; then
        echo "=== $name: skipped, $avail s left"
        note "$name: skipped, no time ($avail s left)"
        [ $opt = 1 ] || failed=$((failed + 1))
        return 124
    fi
    [ "$avail" -lt "$limit" ] && limit=$avail
    t0=$(date +%s)
    echo "=== $name (limit $limit s)"
    # through bash, so that CMD may be one of the functions exported below
    timeout -k 5 "$limit" bash -c '"$@"' _ "$@"
    rc=$?
    echo "=== $name: exit $rc in $(($(date +%s) - t0)) s"
    case $rc in
    0) note "$name: ok, $(($(date +%s) - t0)) s" ;;
    77) note "$name: FAILED: skipped (exit 77) on a GPU machine, $(($(date +%s) - t0)) s" ;;
    75) note "$name: skipped, refused by the device"
        rc=0 ;;
    124 | 137) note "$name: FAILED: timed out after $limit s" ;;
    *) note "$name: FAILED: exit $rc, $(($(date +%s) - t0)) s" ;;
    esac
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
    bundle
    return "$rc"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
        --format=csv 2>&1 || true
    nproc
} >"$work/nvidia-smi.txt"
cat "$work/nvidia-smi.txt"

# Build dependencies: carried .deb files, unpacked (never installed) when
# pkg-config cannot find the libraries.
DEBS=${DEBS:-.debs}
deps_note="system"
if ! { command -v pkg-config >/dev/null && pkg-config --exists libzstd libxxhash check; }; then
    . bench/gpu/deps-env.sh
    if cxs_deps_env "$DEBS" /tmp/ctxshard-deps; then
        deps_note="unpacked from $DEBS"
        echo "build dependencies unpacked from $DEBS into /tmp/ctxshard-deps"
    else
        echo "zstd/xxHash/Check not found and no .deb in $DEBS (bench/gpu/deps.sh makes them)"
    fi
fi
export PATH="$PATH:/usr/local/cuda/bin"

# GPUDirect Storage: libcufile from the nvidia-cufile Python package unless
# CXS_CUFILE names it.
if [ -z "${CXS_CUFILE:-}" ]; then
    CXS_CUFILE=$(python3 -c 'import glob, os, nvidia.cufile as m
d = [os.path.join(p, "lib") for p in m.__path__]
print(next(iter(sorted(f for p in d for f in glob.glob(os.path.join(p, "libcufile.so*")))), ""))' \
        2>/dev/null)
fi
export CXS_CUFILE
note "deps: $deps_note; CXS_CUFILE=${CXS_CUFILE:-none}"
echo "CXS_CUFILE=${CXS_CUFILE:-none}"

# Never reuse a build configured elsewhere or with other dependencies.
origin="$(hostname) ${PKG_CONFIG_LIBDIR:-} $(command -v nvcc)"
if [ -f build-gpu/build.ninja ] && [ "$(cat build-gpu/.run-device-origin 2>/dev/null)" != "$origin" ]; then
    echo "build-gpu was configured elsewhere: removed"
    rm -rf build-gpu
fi
build() {
    { [ -f build-gpu/build.ninja ] || {
        meson setup build-gpu -Dcuda=enabled -Dbuildtype=release &&
            echo "$origin" >build-gpu/.run-device-origin; }; } &&
        ninja -C build-gpu
}
build_logged() { build >"$work/build.txt" 2>&1; }
export -f build build_logged
export origin work
step build 240 build_logged || {
    tail -40 "$work/build.txt"
    echo "build failed"
    bundle
    exit 99
}
exe=$root/build-gpu/tools/ctxshard
gpu_test=$root/build-gpu/tests/gpu/gpu_test
step probe 30 sh -c "'$exe' gpu --json >'$work/probe.json' && cat '$work/probe.json' && '$exe' gpu"

if [ "$phase" != bench ]; then
    step cuda-tests 150 sh -c "CK_FORK=no '$gpu_test' '$exe' cuda '$root/tests/golden' >'$work/cuda-tests.txt' 2>&1;
        rc=\$?; tail -15 '$work/cuda-tests.txt'; exit \$rc"

    san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    # A refused cudaHostRegister is handled (the upload falls back to
    # staging), but memcheck reports every failed API call as an error; the
    # test program checks every call's status itself.
    api=""
    "$san" --help 2>/dev/null | grep -q -- --report-api-errors && api="--report-api-errors no"
    sanitize() { # sanitize TOOL OPTIONS...: exit 0 clean, 9 errors, 75 refused
        local tool=$1 f="$work/sanitizer-$1.txt" rc
        shift
        CXS_GPU_TEST_QUICK=1 CK_FORK=no "$san" --tool "$tool" "$@" --error-exitcode 9 \
            "$gpu_test" "$exe" cuda "$root/tests/golden" >"$f" 2>&1
        rc=$?
        tail -12 "$f"
        if [ $rc -ne 0 ] && [ $rc -ne 9 ] &&
            grep -q -i -E '^=+ .*(not supported|unsupported)' "$f"; then
            echo "$tool: refused by this device"
            return 75
        fi
        return $rc
    }
    export -f sanitize
    export san work exe gpu_test root
    # shellcheck disable=SC2086
    step sanitizer-memcheck 120 sanitize memcheck --leak-check full $api
    step -o sanitizer-racecheck 90 sanitize racecheck
    step -o sanitizer-synccheck 90 sanitize synccheck

    # budgets from the data: resident gets the library's default (4/5 of
    # free device memory); pool the batch ring plus half the features, so
    # that its four segments turn over.
    check() {
        local data=$work/check-data B=1024 k=30 ds m pb extra
        "$exe" synth "$data/raw" --utts 400 --seed 3 --quiet &&
            "$exe" pack "$data/raw" "$data/f16" --dtype f16 --guard 8 --shard-size 8M --quiet &&
            "$exe" pack "$data/raw" "$data/z" --compress zstd --quiet || return 1
        rm -rf "$data/raw"
        for ds in f16 z; do
            pb=$("$exe" info "$data/$ds" --json | python3 -c 'import json, sys
i = json.load(sys.stdin); B, k = int(sys.argv[1]), int(sys.argv[2])
ring = 3 * B * ((2 * k + 1) * i["dim"] * 4 + 8 + 64)  # x, y, descriptors
print(ring + i["storage"]["feature_bytes"] // 2)' $B $k) || return 1
            for m in stream resident pool; do
                extra=""
                [ $m = pool ] && extra="--budget $pb"
                echo "--- $ds $m $extra"
                "$exe" gpu "$data/$ds" --mode $m --check --normalize --batch $B --context $k $extra ||
                    return 1
            done
        done
    }
    check_logged() { check >"$work/check.txt" 2>&1; local rc=$?; tail -12 "$work/check.txt"; return $rc; }
    export -f check check_logged
    step check 90 check_logged

    step reader-emulated 60 sh -c "CK_FORK=no '$gpu_test' '$exe' emulate '$root/tests/golden' >'$work/emulated.txt' 2>&1;
        rc=\$?; tail -5 '$work/emulated.txt'; exit \$rc"
fi

if [ "$phase" != test ]; then
    # shellcheck disable=SC2086
    step bench $(($(left) - 20)) python3 bench/gpu/bench_gpu.py --build build-gpu \
        --jsonl "$OUT/bench.jsonl" --json "$OUT/bench.json" --markdown "$OUT/bench.md" \
        --deadline $(($(left) - 35)) ${BENCH_ARGS:---quick}
fi
bundle
echo "failed steps: $failed"
cat "$OUT/summary.txt"
exit "$failed"
