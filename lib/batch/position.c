/* position.c - positions, set_epoch and saved states of every loader: the
 * one implementation of resume.  Each loader reports its consumer's place
 * (position.h); here it becomes the epoch the loader is positioned in and
 * the start of its next batch, set_epoch applies the rule to it, and a
 * saved position is checked before the loader is reset there. */
#include <stdint.h>

#include "abi.h"
#include "position.h"

uint64_t cxs_position_start(const cxs_position *at, uint64_t epoch) {
    return at && at->epoch == epoch ? at->next : 0;
}

int cxs_position_of(const cxs_position_kind *k, const void *l, cxs_position *out) {
    if (!l || !out) return CXS_E_INVALID;
    cxs_place w;
    k->place(l, &w);
    cxs_position p = {CXS_POSITION_VERSION, k->code, w.epoch, w.start + w.taken * w.stride, {0}};
    if (w.taken >= w.nbatches) { /* the epoch was served to its end */
        if (w.epoch == UINT64_MAX) return CXS_E_RANGE;
        p.epoch = w.epoch + 1, p.next = 0;
    }
    *out = p;
    return 0;
}

int cxs_position_set_epoch(const cxs_position_kind *k, void *l, uint64_t epoch) {
    if (!l) return CXS_E_INVALID;
    cxs_position p;
    /* past the last epoch, the loader stands in none: every epoch from 0 */
    int rc = cxs_position_of(k, l, &p);
    return k->reset(l, epoch, rc ? 0 : cxs_position_start(&p, epoch));
}

int cxs_position_seek(const cxs_position_kind *k, void *l, const cxs_position *p, cxs_diag *d) {
    if (!l || !p) return cxs_diagf(d, CXS_E_INVALID, "%s: no loader or position", k->name);
    if (p->version != CXS_POSITION_VERSION)
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: position version %u, this library (%s) reads version %u",
                         k->name, p->version, cxs_version(), CXS_POSITION_VERSION);
    if (p->kind != k->code)
        return cxs_diagf(d, CXS_E_INVALID,
                         "%s: the position is of another kind of loader (kind %u, this is %u): "
                         "its start counts other things",
                         k->name, p->kind, k->code);
    int rc = CXS_OPTS_CHECK(p, "cxs_position", d);
    if (rc) return rc;
    rc = k->reset(l, p->epoch, p->next);
    return rc ? cxs_diag_copy(d, rc, k->error(l)) : 0;
}

CXS_POSITION_KIND(loader, cxs_loader, CXS_POSITION_FRAMES, "loader")
CXS_POSITION_KIND(utt_loader, cxs_utt_loader, CXS_POSITION_UTTERANCES, "utterance loader")
CXS_POSITION_KIND(mix_loader, cxs_mix_loader, CXS_POSITION_MIX, "mixture loader")
CXS_POSITION_KIND(mix_utt_loader, cxs_mix_utt_loader, CXS_POSITION_MIX_UTT, "utterance mixture loader")
