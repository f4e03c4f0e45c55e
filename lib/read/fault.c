/* fault.c - recovery regions around reads of the mappings (see fault.h),
 * and the messages of serve-time failures. */
#include "fault.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cxs_le.h"
#include "dataset_internal.h"

typedef struct region {
    sigjmp_buf jb;
    const cxs_dataset *ds;
    struct region *prev;
    volatile uint32_t shard;
    volatile uint64_t offset;
} region;

/* The region a thread is in.  Dynamic TLS, not initial-exec: the library
 * is often dlopen'ed (Python), where static TLS may be full and the library
 * would not load.  A first access to dynamic TLS in a thread may allocate,
 * which a signal handler should not do; so the handler reads it only while
 * some thread is inside a region (`active`), and every thread in a region
 * has touched it already.  What remains, a thread that never entered one
 * faulting on a file mapping while another is in a region, allocates at a
 * moment it holds no allocator lock (the fault is on a file mapping, not
 * inside malloc). */
static __thread region *current;
static int active; /* threads inside a region, atomic */
static struct sigaction previous;
static pthread_once_t once = PTHREAD_ONCE_INIT;

/* Not ours: what the previous handler would have done. */
static void chain(int sig, siginfo_t *si, void *uc) {
    if (previous.sa_flags & SA_SIGINFO) {
        if (previous.sa_sigaction) previous.sa_sigaction(sig, si, uc);
        return;
    }
    if (previous.sa_handler == SIG_IGN && si->si_code <= 0) return; /* a kill(), ignored */
    if (previous.sa_handler == SIG_DFL || previous.sa_handler == SIG_IGN) {
        /* The default action: restore it; a fault runs its instruction again
         * on return and dies of it, a signal sent by a process is raised
         * again. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, NULL);
        if (si->si_code <= 0) raise(sig);
        return;
    }
    previous.sa_handler(sig);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    region *r = __atomic_load_n(&active, __ATOMIC_ACQUIRE) ? current : NULL;
    if (r && si->si_code > 0) { /* raised by the kernel for an access */
        const uintptr_t a = (uintptr_t)si->si_addr;
        const cxs_dataset *ds = r->ds;
        for (uint32_t i = 0; i < ds->meta.num_shards; i++) {
            const shard *sh = &ds->shards[i];
            if (sh->map && a >= (uintptr_t)sh->map && a - (uintptr_t)sh->map < sh->size) {
                r->shard = i;
                r->offset = (uint64_t)(a - (uintptr_t)sh->map);
                current = r->prev;
                __atomic_sub_fetch(&active, 1, __ATOMIC_RELEASE);
                siglongjmp(r->jb, 1);
            }
        }
    }
    chain(sig, si, uc);
}

static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, NULL, &previous) == 0) sigaction(SIGBUS, &sa, NULL);
}

void cxs_fault_install(void) { pthread_once(&once, install); }

int cxs_fault_run(const cxs_dataset *ds, int (*fn)(void *), void *arg, cxs_fault *where) {
    region r;
    r.ds = ds;
    r.prev = current;
    r.shard = 0;
    r.offset = 0;
    /* savemask 0: no system call on the way in (regions are entered for
     * every batch part, chunk and utterance).  The handler runs with SIGBUS
     * blocked (it was not blocked before: a fault while it is blocked kills
     * the process), so the way out after a jump unblocks it. */
    if (sigsetjmp(r.jb, 0)) {
        sigset_t bus;
        sigemptyset(&bus);
        sigaddset(&bus, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &bus, NULL);
        where->shard = r.shard;
        where->offset = r.offset;
        return CXS_E_TRUNCATED;
    }
    current = &r;
    __atomic_add_fetch(&active, 1, __ATOMIC_ACQ_REL);
    int rc = fn(arg);
    __atomic_sub_fetch(&active, 1, __ATOMIC_RELEASE);
    current = r.prev;
    return rc;
}

int cxs_fault_inside(const cxs_dataset *ds) {
    for (const region *r = current; r; r = r->prev)
        if (r->ds == ds) return 1;
    return 0;
}

typedef struct id_arg {
    const cxs_dataset *ds;
    uint64_t u;
    char *out;
    size_t cap;
} id_arg;

/* The id, copied from the mapping (which may have lost it too).  Its
 * offsets are only bounds-checked, not its block (the message may be
 * about that very block: checking it would recurse). */
static int read_id(void *p) {
    id_arg *a = p;
    const uint32_t s = cxs_utt_shard(a->ds, a->u);
    const shard *sh = &a->ds->shards[s];
    const uint64_t lu = a->u - sh->u_start, base = 8 * (sh->meta.num_utterances + 1);
    const uint64_t x = cxs_ld64(sh->ids + 8 * lu), y = cxs_ld64(sh->ids + 8 * (lu + 1));
    if (y <= x || y - x > CXS_MAX_ID_LEN || y > sh->t_ids.len - base) return CXS_E_CORRUPT;
    const uint8_t *id = sh->ids + base + x;
    const uint64_t len = y - x;
    size_t n = (size_t)len < a->cap - 1 ? (size_t)len : a->cap - 1;
    for (size_t i = 0; i < n; i++) a->out[i] = (char)(id[i] >= 0x20 && id[i] != 0x7f ? id[i] : '?');
    a->out[n] = 0;
    return 0;
}

void cxs_utt_name(const cxs_dataset *ds, uint64_t u, char *buf, size_t cap) {
    char id[200];
    id_arg a = {ds, u, id, sizeof id};
    cxs_fault f;
    if (cxs_fault_run(ds, read_id, &a, &f) == 0)
        snprintf(buf, cap, "utterance %s (number %llu)", id, (unsigned long long)u);
    else
        snprintf(buf, cap, "utterance number %llu (its id cannot be read)",
                 (unsigned long long)u);
}

int cxs_where_diag(const cxs_dataset *ds, int rc, const cxs_where *w, cxs_diag *d) {
    if (!d) return rc;
    const shard *sh = &ds->shards[w->shard < ds->meta.num_shards ? w->shard : 0];
    char utt[400] = "", chunk[160] = "", reason[640];
    if (w->utt != UINT64_MAX && w->utt < ds->meta.num_utterances) {
        char name[300];
        cxs_utt_name(ds, w->utt, name, sizeof name);
        snprintf(utt, sizeof utt, ": %s", name);
    } else if (w->frame != UINT64_MAX) {
        /* the INDEX that says which utterance could not be read */
        snprintf(utt, sizeof utt, ": the utterance holding frame %llu",
                 (unsigned long long)w->frame);
    }
    if (w->chunk != UINT64_MAX && sh->chunk_table) {
        snprintf(chunk, sizeof chunk, ", chunk %llu", (unsigned long long)w->chunk);
    }
    if (rc == CXS_E_TRUNCATED) {
        struct stat st;
        char now[64];
        if (stat(sh->path, &st) == 0) snprintf(now, sizeof now, "%llu bytes", (unsigned long long)st.st_size);
        else snprintf(now, sizeof now, "%s", strerror(errno));
        const char *sec = "";
        for (uint32_t i = 0; i < sh->c.nsections; i++)
            if (w->offset >= sh->c.sections[i].offset &&
                w->offset - sh->c.sections[i].offset < sh->c.sections[i].length)
                sec = cxs_section_name(sh->c.sections[i].type);
        snprintf(reason, sizeof reason,
                 "the shard changed since the dataset was opened: truncated (byte %llu%s%s%s "
                 "can no longer be read; it was %llu bytes at open, now %s); replace a dataset "
                 "by renaming a new one into place (as pack does), never by truncating or "
                 "rewriting its files",
                 (unsigned long long)w->offset, *sec ? ", in " : "", sec, *sec ? "," : "",
                 (unsigned long long)sh->size, now);
    } else if (rc == CXS_E_CORRUPT && w->bad_label) {
        snprintf(reason, sizeof reason,
                 "frame %llu has label %u, outside the vocabulary of %u symbols: the LABELS "
                 "section is damaged (ctxshard verify); not served",
                 (unsigned long long)w->frame, w->label, ds->meta.vocab_size);
    } else if (rc == CXS_E_CHECKSUM && w->chunk != UINT64_MAX) {
        snprintf(reason, sizeof reason,
                 "the chunk fails its checksum: its compressed bytes are damaged (ctxshard "
                 "verify); not served");
    } else if (rc == CXS_E_CORRUPT && w->chunk != UINT64_MAX) {
        snprintf(reason, sizeof reason,
                 "the chunk does not decode to its rows: its compressed bytes are damaged "
                 "(ctxshard verify); not served");
    } else {
        snprintf(reason, sizeof reason, "%s", cxs_strerror(rc));
    }
    uint64_t at = rc == CXS_E_TRUNCATED || w->chunk != UINT64_MAX ? w->offset : CXS_NO_OFFSET;
    return cxs_diag_at(d, rc, sh->path, at, "%s%s%s: %s", sh->path, utt, chunk, reason);
}
