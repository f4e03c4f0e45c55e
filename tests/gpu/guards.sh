#!/bin/sh
# Proof that the emulated GPU device sees what it must: each ordering or
# ownership guard of the GPU loader is removed in turn, in a scratch copy
# of the tree, and the emulated GPU suite must fail, naming the test that
# caught it.  Not part of the default suites (about a minute per guard):
#
#     sh tests/gpu/guards.sh [SCRATCH_DIR]
#
# GUARDS_MATCH=REGEX (grep -E) runs only the guards whose description matches.
#
# Prints one line per guard: the guard, then FAILED (caught, with the
# failing tests) or PASSED (not caught: a hole in the emulation or in the
# tests).  Exits 1 when any guard was not caught.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d /tmp/cxs-guards-XXXXXX)}
mkdir -p "$work"
git -C "$root" worktree add --detach -f "$work/src" HEAD >/dev/null 2>&1
trap 'git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true' EXIT
cd "$work/src"
meson setup "$work/build" -Dcuda=disabled >/dev/null
ninja -C "$work/build" >/dev/null

# file | text to delete or replace (sed) | what the guard does
guards='lib/gpu/gpu.c|s/int e = l->be->stream_wait(stream, c->ev_ready);/int e = 0;/|the consumer stream waits for the batch (missing stream wait)
lib/gpu/gpu_resident.c|/if (s->used) BE(l, l->be->event_sync(s->ev_ready)); \/\* h_in/d|resident: h_in refilled only after its last copy (missing event sync)
lib/gpu/gpu_stream.c|s/if ((e = be->event_sync(pend_ev))) {/if ((e = 0)) {/|stream: a staging buffer goes back to the workers after its copy (buffer refilled before its copy ran)
lib/gpu/gpu_resident.c|/if (s->used) BE(l, l->be->stream_wait(l->work, s->ev_consumed));/d|resident: a slot is refilled after the consumer is done with it (missing stream wait on ev_consumed)
lib/gpu/gpu.c|/if (l->slot\[i\].ev_consumed) l->be->event_sync(l->slot\[i\].ev_consumed);/d|free waits for the consumer work queued on its batches (read after free)
lib/gpu/gpu.c|/if (l->work) l->be->stream_sync(l->work);$/d|free waits for the loader'"'"'s own queued work (read after free)
lib/gpu/gpu_pool.c|/if (sg->freed_once \&\& (e = l->be->stream_wait(p->copy, sg->ev_freed)))/,+2d|pool: a segment is reloaded after the kernels reading it (missing stream wait on ev_freed)
lib/gpu/gpu_utt.c|/if (s->used) BE(l, l->be->stream_wait(l->work, s->ev_consumed));/d|utterances: a slot is refilled after the consumer is done with it
lib/gpu/gpu.c|s/        rc = gpu_slot_give_back(l, l->handed, l->handed->hstream);/        rc = gpu_slot_give_back(l, l->handed, stream);/|ring modes: a batch'"'"'s consumption fence goes on the stream it was handed to, not the next call'"'"'s
lib/gpu/gpu_stream.c|s/int rc = gpu_slot_give_back(l, l->handed, l->handed->hstream);/int rc = gpu_slot_give_back(l, l->handed, stream);/|stream: a batch'"'"'s consumption fence goes on the stream it was handed to
lib/gpu/gpu.c|s/if (!l->slot\[i\].held \&\& \&l->slot\[i\] != l->ready)/if (\&l->slot[i] != l->ready)/|ring modes: a batch the caller holds (CXS_GPU_HOLD) is never refilled
lib/gpu/gpu_stream.c|s/if (!l->slot\[i\].held \&\& !l->slot\[i\].queued)/if (!l->slot[i].queued)/|stream: a batch the caller holds is never refilled
lib/gpu/gpu.c|/int rc = loader_next(l, stream, batch);/{n;d}|next gives the caller'"'"'s current device back
lib/gpu/gpu.c|s/event_create(\&s->ev_ready, GPU_EVENT_BLOCKING)/event_create(\&s->ev_ready, 0)/|host waits on a slot'"'"'s ready event block, never spin (cudaEventBlockingSync)
lib/gpu/gpu_resident.c|s/int e = p->base ? l->be->event_sync(p->ev) : 0;/int e = 0;/|resident: a registered piece of the mapping is unregistered only after its copies ran
lib/gpu/gpu_internal.h|/^    l->be->last_error();$/d|a launch clears the last error first: an earlier failure the library ignored is not the launch'"'"'s
lib/gpu/gpu_resident.c|s/\*rs = s, \*rrow = off \/ rb;/*rs = s0, *rrow = 0;/|resident: after a refused registration the staged upload goes on where the registered one stopped (nothing uploaded twice)
lib/gpu/gpu.c|s/^    return gpu_fail(l, CXS_E_DEVICE,$/    return GPU_DEVICE_FAIL(l, "", e, "host_alloc"); (void)gpu_fail(l, CXS_E_DEVICE,/|a refused pinned allocation names what it was for and the limit on page-locked memory
lib/gpu/gpu.c|s/if ((long)getpid() != l->pid)/if (0)/|next in a child forked after the device was used says so'

status=0
echo "$guards" | while IFS='|' read -r file expr what; do
    if [ -n "${GUARDS_MATCH:-}" ] && ! echo "$what" | grep -qE "$GUARDS_MATCH"; then continue; fi
    git checkout -q -- lib
    cp "$file" "$work/orig"
    sed -i "$expr" "$file"
    if cmp -s "$file" "$work/orig"; then
        echo "NOT APPLIED ($file: the pattern no longer matches): $what"
        exit 1
    fi
    ninja -C "$work/build" >/dev/null
    if out=$(CK_DEFAULT_TIMEOUT=120 "$work/build/tests/gpu/gpu_test" "$work/build/tools/ctxshard" \
        emulate "$work/src/tests/golden" 2>&1); then
        echo "PASSED (not caught): $what"
        exit 1
    fi
    # (caught by a failing test, not by the program refusing its arguments)
    if ! echo "$out" | grep -qE ':[EF]:all:'; then
        echo "NO TEST FAILED (the program ended otherwise): $what"
        echo "$out" | tail -5
        exit 1
    fi
    echo "FAILED (caught): $what"
    echo "$out" | grep -E ':[EF]:all:' | sed 's/^/    /' | cut -c1-300
done || status=1
git checkout -q -- lib
exit $status
