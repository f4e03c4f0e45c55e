#!/bin/sh
# Run every libFuzzer target for SECONDS each (default 600), JOBS at a time
# (default: the number of CPUs), with AddressSanitizer and
# UndefinedBehaviorSanitizer, starting from the committed corpus.  New
# inputs that add coverage are merged back into tests/fuzz/corpus/<target>
# (minimised with -merge=1); crashes are left in build-fuzz/artifacts/ and
# fail the script.  Needs clang and libclang-rt (Debian: clang-14,
# libclang-rt-14-dev).
#
# usage: sh bench/fuzz.sh [SECONDS] [TARGET...]
set -eu
cd "$(dirname "$0")/.."
secs=${1:-600}
[ $# -gt 0 ] && shift
targets=${*:-npy transcript shard manifest zshard kaldi}
jobs=${JOBS:-$(nproc)}
if [ ! -f build-fuzz/build.ninja ]; then
    CC=clang meson setup build-fuzz -Dfuzzing=true -Db_sanitize=address,undefined \
        -Db_lundef=false -Dbuildtype=debugoptimized
fi
ninja -C build-fuzz
mkdir -p build-fuzz/artifacts build-fuzz/logs
run_one() {
    t=$1
    new=build-fuzz/new-$t
    rm -rf "$new" && mkdir -p "$new"
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$secs" -max_len=65536 -timeout=10 \
        -rss_limit_mb=2048 -artifact_prefix=build-fuzz/artifacts/$t- -print_final_stats=1 \
        "$new" tests/fuzz/corpus/$t > build-fuzz/logs/$t.log 2>&1
    rc=$?
    # Keep only inputs that add coverage to the committed corpus.
    build-fuzz/tests/fuzz/fuzz_$t -merge=1 tests/fuzz/corpus/$t "$new" > build-fuzz/logs/$t-merge.log 2>&1 || true
    rm -rf "$new" /dev/shm/cxs-fuzz-* /tmp/cxs-fuzz-* 2>/dev/null || true
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' build-fuzz/logs/$t.log | grep -o '[0-9]*$' || echo "?")
    echo "$t: exit $rc, $execs executions in ${secs}s, corpus $(ls tests/fuzz/corpus/$t | wc -l) files"
    return $rc
}
status=0
set -- $targets
while [ $# -gt 0 ]; do
    pids=""
    i=0
    while [ $# -gt 0 ] && [ $i -lt "$jobs" ]; do
        run_one "$1" > "build-fuzz/logs/$1.summary" 2>&1 &
        pids="$pids $!:$1"
        shift
        i=$((i + 1))
    done
    for p in $pids; do
        wait "${p%%:*}" || status=1
        cat "build-fuzz/logs/${p#*:}.summary"
    done
done
ls build-fuzz/artifacts/ 2>/dev/null | grep -q . && { echo "crashes in build-fuzz/artifacts/"; status=1; }
exit $status
