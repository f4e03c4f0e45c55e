#include "fuzz_common.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *fuzz_dir(void) {
    static char dir[128];
    if (!dir[0]) {
        struct stat st;
        const char *base = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
        snprintf(dir, sizeof dir, "%s/cxs-fuzz-%ld", base, (long)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t size) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return NULL;
    size_t off = 0;
    while (off < size) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) break;
        off += (size_t)w;
    }
    close(fd);
    return off == size ? path : NULL;
}

void fuzz_exercise(cxs_dataset *ds) {
    cxs_info in;
    cxs_dataset_info(ds, &in);
    cxs_stats st;
    cxs_dataset_stats(ds, &st);
    cxs_diag d;
    memset(&d, 0, sizeof d);
    /* The oracle: a file that opens passes verify or names its damage. */
    if (cxs_dataset_verify(ds, NULL, NULL, &d) != 0 && !d.message[0]) {
        fprintf(stderr, "fuzz oracle: verify failed without a message\n");
        abort();
    }
    for (uint32_t i = 0; i < in.vocab_size && i < 100; i++) {
        const char *s;
        size_t n;
        (void)cxs_dataset_vocab(ds, i, &s, &n);
    }
    /* Label sequences (format 1.2): every symbol of the first utterances,
     * into a buffer of exactly the longest sequence, and their lengths. */
    if (in.label_seqs && in.max_seq_length <= (1u << 20)) {
        int64_t *sq = malloc(in.max_seq_length * sizeof *sq + 8);
        for (uint64_t u = 0; sq && u < in.num_utterances && u < 64; u++) {
            uint32_t len;
            (void)cxs_dataset_label_seq(ds, u, sq, (uint32_t)in.max_seq_length, &len);
            (void)cxs_dataset_label_seq(ds, u, NULL, 0, &len);
        }
        free(sq);
    }
    for (uint64_t u = 0; u < in.num_utterances && u < 64; u++) {
        cxs_utterance ut;
        if (cxs_dataset_utterance(ds, u, &ut) == 0 && ut.num_frames && ut.features) {
            volatile uint8_t sink = ((const uint8_t *)ut.features)[0];
            (void)sink;
        }
    }
    /* Gather every frame (up to a bound) at k=0, inside and beyond the guard. */
    uint64_t n = in.num_frames < 2048 ? in.num_frames : 2048;
    uint32_t ks[3] = {0, in.guard, in.guard + 3};
    uint64_t *frames = malloc((n + 65) * sizeof *frames); /* n, or 64 weighted draws */
    for (uint64_t i = 0; i < n; i++) frames[i] = (i * 7919) % in.num_frames;
    for (int j = 0; j < 3 && in.dim <= 4096; j++) {
        size_t W = (2 * (size_t)ks[j] + 1) * in.dim;
        if (W * n > (64u << 20)) continue;
        float *out = malloc(W * n * sizeof *out + 1);
        int64_t *lab = malloc(n * sizeof *lab + 1);
        int grc = cxs_dataset_gather(ds, frames, n, ks[j], 0, 1, out, in.label_width ? lab : NULL);
        /* The oracle: a zero-copy view of float32 rows is what the gather
         * wrote for the same frame. */
        for (uint64_t i = 0; i < n && i < 64; i++) {
            const void *w;
            if (cxs_dataset_window(ds, frames[i], ks[j], &w) == 0 && grc == 0 &&
                in.dtype == CXS_DTYPE_F32 && memcmp(w, out + i * W, W * sizeof *out) != 0) {
                fprintf(stderr, "fuzz oracle: window(%llu, %u) differs from its gather\n",
                        (unsigned long long)frames[i], ks[j]);
                abort();
            }
        }
        if (st.mean) (void)cxs_dataset_gather(ds, frames, n, ks[j], CXS_GATHER_NORMALIZE, 2, out, NULL);
        free(out);
        free(lab);
    }
    if (in.label_width && n) {
        int64_t *l = malloc(n * sizeof *l);
        (void)cxs_dataset_labels(ds, 0, n, l);
        free(l);
        cxs_sampler *s;
        cxs_sampler_opts so = {.kind = CXS_SAMPLER_WEIGHTED, .seed = 1, .world_size = 1,
                               .num_samples = 64};
        if (cxs_sampler_create(ds, &so, &s) == 0) {
            (void)cxs_sampler_get(s, 0, 0, 64, frames);
            cxs_sampler_free(s);
        }
    }
    cxs_sampler *s;
    cxs_sampler_opts so = {.kind = CXS_SAMPLER_SHUFFLE, .seed = 1, .world_size = 3};
    if (cxs_sampler_create(ds, &so, &s) == 0) {
        uint64_t len = cxs_sampler_length(s);
        (void)cxs_sampler_get(s, 1, 0, len < n ? len : n, frames);
        cxs_sampler_free(s);
    }
    free(frames);
    /* Whole-utterance batches: the utterance sampler and the padding of
     * its first batches (features, labels and label sequences). */
    cxs_utt_sampler_opts uo = {.kind = CXS_UTT_SHUFFLE, .seed = 2, .frame_budget = 4096,
                               .long_alone = 1};
    cxs_utt_sampler *us;
    if (in.dim <= 4096 && in.max_length <= (1u << 16) &&
        cxs_utt_sampler_create(ds, &uo, &us, NULL) == 0) {
        const uint32_t cap = cxs_utt_sampler_max_batch(us);
        const uint64_t mf = cxs_utt_sampler_max_frames(us);
        uint64_t len = 0, g;
        uint64_t *utts = malloc((cap + 1) * sizeof *utts);
        float *x = malloc(mf * in.dim * sizeof *x + 1);
        int64_t *lens = malloc((cap + 1) * 8), *y = malloc(mf * 8 + 1);
        (void)cxs_utt_sampler_length(us, 0, NULL, &len);
        for (uint64_t b = 0; utts && x && lens && y && b < len && b < 4; b++) {
            uint32_t nb;
            if (cxs_utt_sampler_batch(us, 0, b, utts, cap, &nb, &g)) break;
            uint64_t tmax = 0, lmax = 0;
            for (uint32_t i = 0; i < nb; i++) {
                cxs_utterance ut;
                if (cxs_dataset_utterance(ds, utts[i], &ut) == 0 && ut.num_frames > tmax)
                    tmax = ut.num_frames;
                uint32_t sl;
                if (in.label_seqs && cxs_dataset_label_seq(ds, utts[i], NULL, 0, &sl) == 0 &&
                    sl > lmax)
                    lmax = sl;
            }
            if (nb * tmax > mf) continue;
            (void)cxs_dataset_pad_batch(ds, utts, nb, tmax, 0, NULL, x, lens,
                                        in.label_width ? y : NULL);
            if (in.label_seqs && lmax && nb * lmax <= mf) {
                int64_t *tl = malloc((cap + 1) * 8);
                if (tl) (void)cxs_dataset_pad_targets(ds, utts, nb, lmax, y, tl);
                free(tl);
            }
        }
        free(utts), free(x), free(lens), free(y);
        cxs_utt_sampler_free(us);
    }
}
