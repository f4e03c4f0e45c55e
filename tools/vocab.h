/* vocab.h - `ctxshard vocab DATASET`: a dataset's vocabulary, one symbol a
 * line in label order, the file --vocab takes. */
#ifndef CXS_TOOL_VOCAB_H
#define CXS_TOOL_VOCAB_H

/* An exit code; the symbols on stdout, messages on stderr. */
int vocab_run(const char *dir);

#endif
