#!/bin/sh
# bench/cold.sh - the reader on cold data, and on data larger than its
# memory (issue 13).  As root: it drops the page cache before every cold
# run and runs the reader in a memory cgroup.  See bench/README.md.
#
# usage: bench/cold.sh [BUILD]
# environment (defaults):
#   CXS_COLD_DIR=/tmp/coldbench    datasets, made once and reused
#   CXS_COLD_LIMIT_MB=1024         memory limit of the reader's cgroup
#   CXS_COLD_UTTS=28539            utterances of the big dataset (4x the limit)
#   CXS_COLD_FIT_UTTS=3000         utterances of the one that fits the limit
#   CXS_COLD_REPEATS=3             runs of each cold and warm figure (median)
#   CXS_COLD_FIT_REPEATS=3         runs of the epochs of the fitting dataset
#   CXS_COLD_BATCHES=400           batches a warm run times
#   CXS_COLD_SHUFFLE_BATCHES=100   batches a cold full-shuffle run times
#   CXS_COLD_BLOCK_BATCHES=3000    batches a cold block run times (its start
#                                  reads the first round's blocks: amortise it)
set -eu

BUILD=${1:-build}
CXS=$BUILD/tools/ctxshard
PROBE=$BUILD/bench/diskprobe
DIR=${CXS_COLD_DIR:-/tmp/coldbench}
LIMIT_MB=${CXS_COLD_LIMIT_MB:-1024}
UTTS=${CXS_COLD_UTTS:-28539}
FIT_UTTS=${CXS_COLD_FIT_UTTS:-3000}
REPEATS=${CXS_COLD_REPEATS:-3}
FIT_REPEATS=${CXS_COLD_FIT_REPEATS:-$REPEATS}
BATCHES=${CXS_COLD_BATCHES:-400}
SHUFFLE_BATCHES=${CXS_COLD_SHUFFLE_BATCHES:-100}
BLOCK_BATCHES=${CXS_COLD_BLOCK_BATCHES:-3000}
K=30
B=1024
THREADS=2
# the block sampler's page-cache budget: the limit less the loader's own
# memory (ring of batches, tables) and some slack
BLOCK_MEM_MB=$((LIMIT_MB * 3 / 4))

die() { echo "cold.sh: $*" >&2; exit 1; }

[ -x "$CXS" ] && [ -x "$PROBE" ] || die "build first: ninja -C $BUILD ($CXS, $PROBE)"
[ "$(id -u)" = 0 ] || die "needs root: it drops the page cache and makes a memory cgroup"
drop() {
    sync
    echo 3 > /proc/sys/vm/drop_caches 2>/dev/null ||
        die "cannot drop the page cache (echo 3 > /proc/sys/vm/drop_caches failed): cold figures would be warm"
}
drop

# ---- a memory cgroup: v1, v2, or a systemd scope ------------------------
CG=""
CGKIND=""
cleanup() { [ -n "$CG" ] && rmdir "$CG" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
limit_bytes=$((LIMIT_MB * 1024 * 1024))
if [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory/cxs_cold_$$" 2>/dev/null; then
    CG=/sys/fs/cgroup/memory/cxs_cold_$$
    echo "$limit_bytes" > "$CG/memory.limit_in_bytes" && CGKIND="cgroup v1 ($CG)" || { cleanup; CG=""; }
fi
if [ -z "$CGKIND" ]; then
    for root in /sys/fs/cgroup/unified /sys/fs/cgroup; do
        if [ -f "$root/cgroup.controllers" ] && grep -qw memory "$root/cgroup.subtree_control" 2>/dev/null &&
            mkdir "$root/cxs_cold_$$" 2>/dev/null; then
            CG=$root/cxs_cold_$$
            echo "$limit_bytes" > "$CG/memory.max" && CGKIND="cgroup v2 ($CG)" && break
            cleanup
            CG=""
        fi
    done
fi
if [ -z "$CGKIND" ] && command -v systemd-run > /dev/null &&
    systemd-run --scope -q -p MemoryMax="$limit_bytes" true 2>/dev/null; then
    CGKIND="systemd-run --scope -p MemoryMax=$limit_bytes"
fi
[ -n "$CGKIND" ] || die "no memory cgroup: neither v1 (/sys/fs/cgroup/memory), v2 with the memory controller, nor systemd-run"

limited() { # run "$@" under the memory limit
    if [ -n "$CG" ]; then
        sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$CG" "$@"
    else
        systemd-run --scope -q -p MemoryMax="$limit_bytes" "$@"
    fi
}

# ---- the datasets ------------------------------------------------------
make_ds() { # make_ds NAME UTTS SEED SHARD_SIZE
    if [ ! -f "$DIR/$1/manifest.cxs" ] && [ ! -d "$DIR/$1" ]; then
        echo "making $DIR/$1 ($2 utterances; once, reused afterwards)..."
        rm -rf "$DIR/raw_$1"
        "$CXS" synth "$DIR/raw_$1" --utts "$2" --seed "$3" --quiet
        "$CXS" pack "$DIR/raw_$1" "$DIR/$1" --shard-size "$4" --quiet
        rm -rf "$DIR/raw_$1"
    fi
}
mkdir -p "$DIR"
make_ds data "$UTTS" 0 1100M
make_ds fit "$FIT_UTTS" 1 1100M
shards() { find "$DIR/$1" -type f ! -name 'manifest*' -size +1M | sort; }
bytes_of() { du -cb $(shards "$1") | tail -1 | cut -f1; }
DATA_BYTES=$(bytes_of data)
FIT_BYTES=$(bytes_of fit)
[ "$DATA_BYTES" -ge $((4 * limit_bytes)) ] ||
    echo "note: the big dataset ($DATA_BYTES bytes) is less than 4x the limit ($limit_bytes)"
[ "$FIT_BYTES" -lt $((limit_bytes - 128 * 1024 * 1024)) ] ||
    die "the dataset meant to fit ($FIT_BYTES bytes) does not fit the limit with room for the loader"

# ---- helpers -----------------------------------------------------------
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
rate() { sed -n 's/.* \([0-9][0-9]*\) samples\/s.*/\1/p' "$1"; }
first() { sed -n 's/.*first batch \([0-9.]*\) ms.*/\1/p' "$1"; }
openms() { sed -n 's/.*open \([0-9.]*\) ms.*/\1/p' "$1"; }
diskread() { sed -n 's/.*read from disk: \([0-9]*\) bytes.*/\1/p' "$1"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", b - a }'; }
TMP=$(mktemp -d)
trap 'cleanup; rm -rf "$TMP"' EXIT INT TERM

bench() { # bench OUT_FILE [limited] DATASET ARGS...: one bench-read run
    out=$1
    shift
    if [ "$1" = limited ]; then
        shift
        limited "$CXS" bench-read "$@" --context $K --batch $B --threads $THREADS > "$out"
    else
        "$CXS" bench-read "$@" --context $K --batch $B --threads $THREADS > "$out"
    fi
}

echo "load before: $(uptime)"
echo "memory limit: $LIMIT_MB MiB, $CGKIND"
echo "big dataset: $DATA_BYTES bytes ($(awk "BEGIN { printf \"%.1f\", $DATA_BYTES / $limit_bytes }")x the limit); fitting one: $FIT_BYTES bytes"

# ---- the disk's own rates ----------------------------------------------
drop
"$PROBE" --seq-mib 1024 --seconds 3 $(shards data) > "$TMP/disk"
SEQ=$(sed -n 's/^seq_mb_s //p' "$TMP/disk")
Q1=$(sed -n 's/^rand8k_qd1_iops //p' "$TMP/disk")
Q4=$(sed -n 's/^rand8k_qd4_iops //p' "$TMP/disk")
Q16=$(sed -n 's/^rand8k_qd16_iops //p' "$TMP/disk")

# ---- cold runs (each after dropping the page cache) ---------------------
: > "$TMP/cs.rate"; : > "$TMP/cs.first"; : > "$TMP/cb.rate"; : > "$TMP/cb.first"
: > "$TMP/cs.read"; : > "$TMP/cb.read"; : > "$TMP/cs.open"; : > "$TMP/cb.open"
for i in $(seq "$REPEATS"); do
    drop
    bench "$TMP/cs" limited "$DIR/data" --batches "$SHUFFLE_BATCHES" --sampler shuffle --seed "$i"
    rate "$TMP/cs" >> "$TMP/cs.rate"; first "$TMP/cs" >> "$TMP/cs.first"; diskread "$TMP/cs" >> "$TMP/cs.read"
    openms "$TMP/cs" >> "$TMP/cs.open"
    drop
    bench "$TMP/cb" limited "$DIR/data" --batches "$BLOCK_BATCHES" --sampler block --memory "${BLOCK_MEM_MB}M" --seed "$i"
    rate "$TMP/cb" >> "$TMP/cb.rate"; first "$TMP/cb" >> "$TMP/cb.first"; diskread "$TMP/cb" >> "$TMP/cb.read"
    openms "$TMP/cb" >> "$TMP/cb.open"
done

# ---- a cold epoch of data that fits ------------------------------------
"$CXS" bench-read "$DIR/fit" --batches 1 > "$TMP/fitinfo"
FIT_FRAMES=$(sed -n 's/^[^:]*: \([0-9]*\) frames.*/\1/p' "$TMP/fitinfo")
EPOCH_BATCHES=$(((FIT_FRAMES + B - 1) / B))
: > "$TMP/fc.loader"; : > "$TMP/fc.warm"; : > "$TMP/fc.bg"; : > "$TMP/fw.epoch"
for i in $(seq "$FIT_REPEATS"); do
    drop # the loader alone, cold
    t0=$(now)
    bench "$TMP/fc" limited "$DIR/fit" --batches "$EPOCH_BATCHES" --sampler shuffle --seed "$i"
    t1=$(now)
    elapsed "$t0" "$t1" >> "$TMP/fc.loader"
    drop # ctxshard warm (sequential, at disk speed), then the loader
    t0=$(now)
    limited "$CXS" warm "$DIR/fit" --quiet
    bench "$TMP/fcw" limited "$DIR/fit" --batches "$EPOCH_BATCHES" --sampler shuffle --seed "$i"
    t1=$(now)
    elapsed "$t0" "$t1" >> "$TMP/fc.warm"
    drop # ctxshard warm in the background while the loader runs (Python's Loader(prefetch=))
    t0=$(now)
    limited sh -c '"$0" warm "$1" --quiet & "$0" bench-read "$1" --batches "$2" --sampler shuffle --seed "$3" --context "$4" --batch "$5" --threads "$6" > "$7"; wait' \
        "$CXS" "$DIR/fit" "$EPOCH_BATCHES" "$i" $K $B $THREADS "$TMP/fcb"
    t1=$(now)
    elapsed "$t0" "$t1" >> "$TMP/fc.bg"
    # warm: the same epoch again, everything cached
    t0=$(now)
    bench "$TMP/fw" limited "$DIR/fit" --batches "$EPOCH_BATCHES" --sampler shuffle --seed "$i"
    t1=$(now)
    elapsed "$t0" "$t1" >> "$TMP/fw.epoch"
done

# ---- warm full shuffle over the big dataset (no limit: it fits in RAM) ---
"$CXS" warm "$DIR/data" --quiet
: > "$TMP/ws.rate"; : > "$TMP/ws.first"; : > "$TMP/ws.open"; : > "$TMP/ws.read"
for i in $(seq "$REPEATS"); do
    bench "$TMP/ws" "$DIR/data" --batches "$BATCHES" --sampler shuffle --seed "$i"
    rate "$TMP/ws" >> "$TMP/ws.rate"; first "$TMP/ws" >> "$TMP/ws.first"; openms "$TMP/ws" >> "$TMP/ws.open"
    diskread "$TMP/ws" >> "$TMP/ws.read"
done
drop

# ---- the table ---------------------------------------------------------
WS=$(median < "$TMP/ws.rate"); WSF=$(median < "$TMP/ws.first"); WSO=$(median < "$TMP/ws.open")
CSO=$(median < "$TMP/cs.open"); CBO=$(median < "$TMP/cb.open"); WSR=$(median < "$TMP/ws.read")
CS=$(median < "$TMP/cs.rate"); CSF=$(median < "$TMP/cs.first"); CSR=$(median < "$TMP/cs.read")
CB=$(median < "$TMP/cb.rate"); CBF=$(median < "$TMP/cb.first"); CBR=$(median < "$TMP/cb.read")
FL=$(median < "$TMP/fc.loader"); FWL=$(median < "$TMP/fc.warm"); FBG=$(median < "$TMP/fc.bg")
FE=$(median < "$TMP/fw.epoch")
MODEL=$(awk "BEGIN { printf \"%.2f\", $FIT_BYTES / ($SEQ * 1e6) + $FE }")
echo
echo "k=$K, B=$B, $THREADS threads; batches a run: warm $BATCHES, cold shuffle $SHUFFLE_BATCHES, cold block $BLOCK_BATCHES; medians of $REPEATS runs ($FIT_REPEATS for the fitting dataset's epochs)"
echo "disk: sequential $SEQ MB/s (O_DIRECT, 4 MiB reads); random 8 KiB reads/s: $Q1 at QD1, $Q4 at QD4, $Q16 at QD16"
printf '%-52s %10s %8s %14s %14s\n' "" "samples/s" "open ms" "first batch ms" "read from disk"
printf '%-52s %10s %8s %14s %14s\n' "warm full shuffle (no limit)" "$WS" "$WSO" "$WSF" "$WSR"
printf '%-52s %10s %8s %14s %14s\n' "cold full shuffle (limit ${LIMIT_MB}M)" "$CS" "$CSO" "$CSF" "$CSR"
printf '%-52s %10s %8s %14s %14s\n' "cold block shuffle (limit ${LIMIT_MB}M, --memory ${BLOCK_MEM_MB}M)" "$CB" "$CBO" "$CBF" "$CBR"
echo "cold epoch of data that fits ($FIT_BYTES bytes, $FIT_FRAMES frames, limit ${LIMIT_MB}M):"
echo "  loader alone:                     $FL s"
echo "  ctxshard warm, then the loader:   $FWL s"
echo "  ctxshard warm beside the loader:  $FBG s"
echo "  warm epoch:                       $FE s"
echo "  bytes / sequential rate + warm epoch: $MODEL s"
echo
awk -v ws="$WS" -v cs="$CS" -v cb="$CB" -v csf="$CSF" -v fl="$FL" -v fwl="$FWL" -v fbg="$FBG" -v m="$MODEL" 'BEGIN {
    printf "targets:\n"
    printf "  block shuffle >= 50%% of warm full shuffle:  %.0f%%  %s\n", 100 * cb / ws, (cb >= 0.5 * ws) ? "met" : "MISSED"
    printf "  cold full shuffle >= 20,000 samples/s:       %.0f  %s\n", cs, (cs >= 20000) ? "met" : "MISSED"
    printf "  cold first batch <= 200 ms:                  %.1f ms  %s\n", csf, (csf <= 200) ? "met" : "MISSED"
    printf "  cold epoch that fits <= 1.3x model:          loader alone %.2fx %s; warm then loader %.2fx %s; warm beside %.2fx %s\n", fl / m, (fl <= 1.3 * m) ? "met" : "MISSED", fwl / m, (fwl <= 1.3 * m) ? "met" : "MISSED", fbg / m, (fbg <= 1.3 * m) ? "met" : "MISSED"
}'
[ "$WSR" -lt $((DATA_BYTES / 100)) ] ||
    echo "note: the warm runs read $WSR bytes from disk: the page cache lost the dataset (memory pressure, or a drop_caches elsewhere); the warm figure is not a warm one"
echo "load after: $(uptime)"
