/* vocab.c - `ctxshard vocab DATASET`: the vocabulary of a dataset, one
 * symbol a line in label order (label l is line l + 1), so that another
 * split can be numbered like this one: `ctxshard vocab train.cxs >
 * vocab.txt`, then `--vocab vocab.txt` for pack, check and import.  A
 * symbol never holds a control byte (spec: VOCAB), so every one is one
 * line. */
#include <stdio.h>

#include "ctxshard.h"
#include "util.h"
#include "vocab.h"

int vocab_run(const char *dir) {
    cxs_dataset *ds;
    int ec = open_dataset(dir, NULL, &ds);
    if (ec) return ec;
    cxs_info in;
    cxs_dataset_info(ds, &in);
    if (in.vocab_size == 0) {
        warnx_("%s: features only: no vocabulary (no labels were packed)", dir);
        cxs_dataset_close(ds);
        return EXIT_DATA;
    }
    for (uint32_t i = 0; i < in.vocab_size; i++) {
        const char *s;
        size_t n;
        if (cxs_dataset_vocab(ds, i, &s, &n)) {
            warnx_("%s: vocabulary symbol %u cannot be read", dir, i);
            cxs_dataset_close(ds);
            return EXIT_DATA;
        }
        fwrite(s, 1, n, stdout);
        putchar('\n');
    }
    cxs_dataset_close(ds);
    if (fflush(stdout) || ferror(stdout)) {
        warnx_("%s: writing the vocabulary to standard output failed", dir);
        return EXIT_SYSTEM;
    }
    return 0;
}
