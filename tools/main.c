/* main.c - the ctxshard command: argument parsing and dispatch. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxshard.h"
#include "cxs_version.h"
#include "cachecmd.h"
#include "benchread.h"
#include "benchutt.h"
#include "orderstats.h"
#include "ctxshard_gpu.h"
#include "gpucmd.h"
#include "stats.h"
#include "inspect.h"
#include "pack.h"
#include "import.h"
#include "ctxshard_import.h"
#include "partenv.h"
#include "synth.h"
#include "warm.h"
#include "util.h"
#include "vocab.h"
#include "cxs_format.h"
#include "cxs_qcodec.h"

static const char *const usage_top =
    "usage: ctxshard <command> [options]\n"
    "\n"
    "Compile a speech-frame dataset into mmap-able shards once, then serve\n"
    "zero-padded context windows from them.\n"
    "\n"
    "commands:\n"
    "  synth RAW      write a synthetic raw dataset (RAW/mfcc, RAW/transcript)\n"
    "  check RAW      validate a raw dataset without writing anything\n"
    "  pack RAW OUT   convert a raw dataset into a packed dataset\n"
    "  convert IN OUT the same dataset compressed (zstd) or uncompressed\n"
    "  import kaldi SCP_OR_ARK OUT  Kaldi features (and labels) into a packed dataset\n"
    "  import hdf5 FILE.h5 OUT      HDF5 features into a packed dataset\n"
    "  merge PART... OUT  join partial datasets packed with --part I/N\n"
    "  verify OUT     re-hash every byte of a packed dataset\n"
    "  info OUT       describe a packed dataset\n"
    "  vocab OUT      print a dataset's vocabulary, one symbol a line (the file\n"
    "                 --vocab takes: number another split like this one)\n"
    "  gather OUT     write context windows (and labels) as .npy files\n"
    "  bench-read OUT measure how fast the loader serves windows\n"
    "  bench-utt OUT  measure whole-utterance padded batches: bucketed vs random\n"
    "  warm OUT       read a dataset into the page cache at the disk's rate\n"
    "  gpu [OUT]      the GPU path: device probe; batches delivered to the device\n"
    "  stats OUT      label, length and feature statistics, charts, HTML report\n"
    "  push OUT URL   upload a packed dataset to s3:// or http(s)://, the manifest last\n"
    "  cache [ls|prune|clear]  the node-local cache of datasets opened from URLs\n"
    "\n"
    "OUT, where a command reads a dataset, may be a URL: http://HOST/PATH,\n"
    "https://..., or s3://BUCKET/PREFIX (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,\n"
    "AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL): it is downloaded once into\n"
    "the cache (--cache DIR, CTXSHARD_CACHE; within --cache-limit SIZE,\n"
    "CTXSHARD_CACHE_LIMIT), verified, and read from there.\n"
    "\n"
    "`ctxshard <command> --help` describes each command; --version prints\n"
    "the version.  Exit status: 0 success, 1 invalid or corrupt data,\n"
    "2 usage error, 3 system error.\n";

static const char *const usage_synth =
    "usage: ctxshard synth RAW [--utts N] [--dim D] [--seed S] [--offset I]\n"
    "                      [--dtype f32|f64] [--no-transcripts]\n"
    "                      [--transcripts frames|sequence] [--quiet]\n"
    "\n"
    "Write a deterministic raw dataset in the HW1P2 layout: RAW/mfcc/<id>.npy\n"
    "([T, D] features) and RAW/transcript/<id>.npy ('<U5' phonemes with [SOS]\n"
    "and [EOS]).  Lengths are LibriSpeech-like (mean about 1,270 frames,\n"
    "100..3,500), phoneme frequencies are skewed.  RAW must not exist or be empty.\n"
    "\n"
    "  --utts N           utterances (default 100)\n"
    "  --dim D            features per frame (default 28)\n"
    "  --seed S           random seed (default 0); same seed, same bytes\n"
    "  --offset I         number utterances from I (default 0): with the same seed\n"
    "                     and disjoint ranges, splits of one dataset (train, dev)\n"
    "  --dtype f32|f64    feature type in the files (default f32)\n"
    "  --no-transcripts   features only, like a test split\n"
    "  --transcripts L    frames (default): [SOS], one phoneme per frame, [EOS]\n"
    "                     (HW1P2); sequence: [SOS], the utterance's phoneme\n"
    "                     sequence (every run of frames once), [EOS] (HW3P2),\n"
    "                     learnable from the features by a sequence model\n"
    "  --quiet            print nothing on success\n";

static const char *const usage_check =
    "usage: ctxshard check RAW [--vocab FILE] [--sos SYM] [--eos SYM] [--threads N]\n"
    "                      [--transcripts frames|sequence|both] [--fill-nonfinite]\n"
    "                      [--quiet]\n"
    "\n"
    "Run every validation pack runs and list every problem, one line each,\n"
    "naming the file; write nothing.  Exit status 1 when there are problems.\n"
    "\n"
    "  --vocab FILE   phoneme list, one symbol per line (default: the standard\n"
    "                 42-symbol list); a label is the symbol's line number - 1\n"
    "                 (`ctxshard vocab DATASET` prints a dataset's in this form)\n"
    "  --sos SYM      the symbol every transcript starts with (default [SOS])\n"
    "  --eos SYM      the symbol every transcript ends with (default [EOS])\n"
    "  --transcripts L  what the transcripts hold, as for pack (default frames)\n"
    "  --fill-nonfinite  NaN and infinite values are no problem, as for pack\n"
    "  --threads N    reader threads (default: all CPUs)\n";

static const char *const usage_pack =
    "usage: ctxshard pack RAW OUT [--dtype f32|f16|bf16|q8|q16] [--guard G]\n"
    "                     [--shard-size SIZE] [--threads N] [--on-error fail|skip]\n"
    "                     [--normalize none|utterance] [--vocab FILE] [--quiet]\n"
    "                     [--sos SYM] [--eos SYM] [--transcripts frames|sequence|both]\n"
    "                     [--compress zstd[:LEVEL]] [--chunk-size SIZE] [--no-shuffle]\n"
    "                     [--part I/N|env] [--fill-nonfinite] [--block-sums on|off]\n"
    "\n"
    "Validate RAW, convert it and write a packed dataset to OUT atomically (a\n"
    "temporary directory beside OUT, fsynced, renamed into place; a previous\n"
    "dataset at OUT is replaced only when the new one is complete).\n"
    "Utterances are taken in byte order of their ids.  Without RAW/transcript\n"
    "the dataset holds features only.\n"
    "\n"
    "  --dtype T          stored feature type: f32 (default), f16, bf16\n"
    "                     (round to nearest even), or q8 / q16: Kaldi's compressed\n"
    "                     matrices, 1 or 2 bytes a value, coded per utterance as\n"
    "                     Kaldi codes them (format 1.4; no guard rows)\n"
    "  --guard G          zero rows around every utterance (default 64): windows\n"
    "                     with context k <= G are zero-copy views\n"
    "  --shard-size SIZE  largest shard file: bytes, or with K/M/G/T, also 1.5G\n"
    "                     (default 1G); a single longer utterance gets a shard of\n"
    "                     its own\n"
    "  --threads N        reader and compression threads (default: all CPUs);\n"
    "                     the output is byte-identical for any N\n"
    "  --on-error P       fail (default): write nothing on a bad utterance;\n"
    "                     skip: leave it out and list it in the dataset (a\n"
    "                     features-only split, a test split, then has fewer\n"
    "                     frames than the raw one: a loud warning says so)\n"
    "  --fill-nonfinite   store NaN and infinite feature values as 0 and keep\n"
    "                     the utterance (each one named), instead of refusing\n"
    "                     it: for a test split, which needs every frame\n"
    "  --normalize M      none (default) or utterance: per-utterance mean and\n"
    "                     variance normalisation before storing\n"
    "  --vocab FILE       phoneme list, one symbol per line (label = line - 1;\n"
    "                     `ctxshard vocab DATASET` prints a dataset's); default:\n"
    "                     the standard 42-symbol list of HW1P2, the same for\n"
    "                     every split (an unknown symbol is refused)\n"
    "  --sos SYM, --eos SYM\n"
    "                     the symbols every transcript starts and ends with\n"
    "                     (default [SOS] and [EOS]); stripped, never labels\n"
    "  --transcripts L    what RAW/transcript holds: frames (default): [SOS], one\n"
    "                     symbol per frame, [EOS] (HW1P2), stored as frame labels;\n"
    "                     sequence: a phoneme sequence of any length >= 1 (HW3P2),\n"
    "                     bare or framed by [SOS] .. [EOS] (both, stripped), stored\n"
    "                     as the utterance's label sequence, no frame labels;\n"
    "                     both: frames, plus the label sequence of the frame\n"
    "                     labels (every run of one label once)\n"
    "  --quiet            no progress bar, no summary\n"
    "  --compress zstd[:LEVEL]\n"
    "                     store features as independently decodable zstd chunks\n"
    "                     (level 1..19, default 3); read transparently, but no\n"
    "                     zero-copy windows\n"
    "  --chunk-size SIZE  decoded bytes per chunk, rounded down to whole rows\n"
    "                     (at least one; default 64K)\n"
    "  --no-shuffle       no byte-shuffle filter before zstd\n"
    "  --block-sums on|off\n"
    "                     on (default): a checksum per 64 KiB of features and per\n"
    "                     4 KiB of labels and tables (format 1.3), so that verify,\n"
    "                     warm and the block sampler name the utterances a damaged\n"
    "                     block holds; off: one checksum per section (the bytes\n"
    "                     of format 1.2 writers; damage is detected, not located)\n"
    "  --part I/N         pack only the I-th of N slices (whole shards) into a\n"
    "                     partial dataset; join the N parts with ctxshard merge\n"
    "  --part env         I/N from the job launcher: a Slurm array task\n"
    "                     (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN + 1 of\n"
    "                     SLURM_ARRAY_TASK_COUNT) or an MPI rank (rank + 1 of size:\n"
    "                     OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/PMI_SIZE, PMIX_RANK)\n";

static const char *const usage_convert =
    "usage: ctxshard convert IN OUT (--compress zstd[:LEVEL] | --no-compress | --dtype T)\n"
    "                        [--chunk-size SIZE] [--no-shuffle] [--threads N] [--quiet]\n"
    "                        [--block-sums on|off]\n"
    "\n"
    "Write dataset IN to OUT in the other storage form: compressed features\n"
    "(zstd chunks) or plain, zero-copy ones.  The result is byte-identical to\n"
    "packing the raw data directly in that form.  OUT is written atomically.\n"
    "--threads N compresses on N threads (default: all CPUs), same bytes.\n"
    "--block-sums (default on) as for pack: converting a dataset packed without\n"
    "block sums (or before format 1.3) in its own form adds them.\n"
    "--dtype T stores IN's features as f32, f16, bf16, q8 or q16 (q8, q16: coded\n"
    "from the stored values, as pack codes them; without --compress or\n"
    "--no-compress OUT keeps IN's form).  A q8 or q16 IN keeps its codes into\n"
    "its own type (a re-layout, e.g. --compress zstd); into another type its\n"
    "values are the decoded float32 the loaders serve, converted from there.\n";

static const char *const usage_import =
    "usage: ctxshard import kaldi SCP_OR_ARK OUT [--text FILE | --ali FILE]\n"
    "                     [--vocab FILE | --vocab-from-data]\n"
    "                     [--no-sort] [--dtype f32|f16|bf16|q8|q16] [--guard G] [--shard-size SIZE]\n"
    "                     [--threads N] [--on-error fail|skip] [--normalize none|utterance]\n"
    "                     [--compress zstd[:LEVEL]] [--chunk-size SIZE] [--no-shuffle] [--quiet]\n"
    "                     [--part I/N|env] [--block-sums on|off]\n"
    "\n"
    "Import Kaldi features into a packed dataset at OUT, written atomically like\n"
    "pack.  SCP_OR_ARK is a feats.scp (`utt path.ark:offset` lines, paths relative\n"
    "to the current directory as in Kaldi) or a bare archive (.ark), or Kaldi's\n"
    "rspecifier of one (scp:FILE, ark:FILE, with options: ark,t:, scp,s,cs:, ark,o:\n"
    "...; s is checked, p is refused, the others change nothing) or the wspecifier\n"
    "that wrote it (ark,scp:A.ark,A.scp: the archive is read).  A pipe, standard\n"
    "input and a directory are refused, saying what to give.  Binary objects FM,\n"
    "DM, FV, DV (a vector is one column) and the compressed CM, CM2, CM3, decoded\n"
    "exactly as Kaldi decodes them, and text-form matrices (ark,t); scp entries\n"
    "may select rows and columns with Kaldi's ranges (a.ark:123[0:99],\n"
    "[0:99,0:12]).  Utterances are taken in byte order of their ids: an unsorted\n"
    "listing is sorted (and said so).  With --dtype q8 a CM object keeps its own\n"
    "codes and headers (no second quantization; --dtype q16: a CM2 object); any\n"
    "other object is coded from its decoded values, and how many were is said\n"
    "on standard error.\n"
    "\n"
    "  --text FILE      a Kaldi text file (utt w1 w2 ...): label sequences\n"
    "  --ali FILE       per-frame alignments (utt p1 .. pT, ali-to-phones\n"
    "                   --per-frame=true): frame labels, one per frame\n"
    "                   (both also as ark:FILE, ark,t:FILE)\n"
    "  --vocab FILE     their vocabulary, required with --text or --ali: a symbol\n"
    "                   table (`symbol id` lines with ids 0..n-1, as words.txt,\n"
    "                   phones.txt) or one symbol per line (the training split's:\n"
    "                   ctxshard vocab TRAIN.cxs > vocab.txt); integer tokens are ids\n"
    "  --vocab-from-data  number the symbols of this split's own labels instead (the\n"
    "                   distinct tokens in byte order, or 0..max for integers):\n"
    "                   another split numbered so may give its labels other meanings\n"
    "  --no-sort        refuse an unsorted listing (with the command that sorts it)\n"
    "  --on-error P     fail (default): write nothing on a bad utterance; skip:\n"
    "                   leave it out and list it in the dataset\n"
    "  --threads N      reader threads (read, decode, convert) and compression\n"
    "                   threads (default: all CPUs); the same bytes for any N\n"
    "  --part I/N       import only the I-th of N slices (whole shards, planned from\n"
    "                   the headers) into a partial dataset; ctxshard merge joins the\n"
    "                   N parts into the bytes of the whole import (env: as for pack)\n"
    "  the other options as for pack\n"
    "\n"
    "usage: ctxshard import hdf5 FILE.h5 OUT [pack's --dtype, --guard, --shard-size,\n"
    "                     --threads, --on-error, --normalize, --compress ...]\n"
    "\n"
    "Import an HDF5 file of features (labels are not imported): one dataset per\n"
    "utterance (Lhotse's NumpyHdf5Writer: the dataset's path is the id, its value\n"
    "[T, D] floats; ids in byte order), or the concatenated layout: exactly the root\n"
    "datasets features [N, D], offsets [U+1] (0 .. N) and ids [U] (strings, in\n"
    "byte order).  Other files are refused naming the dataset.  Needs a build\n"
    "with the HDF5 library (libhdf5-dev).\n";

static const char *const usage_merge =
    "usage: ctxshard merge PART... OUT [--move] [--quiet]\n"
    "\n"
    "Join the partial datasets written by `ctxshard pack RAW PART --part I/N`\n"
    "(all N of them, any order) into one dataset, byte-identical to a single\n"
    "`ctxshard pack RAW OUT` with the same options; statistics are merged\n"
    "exactly.  Shard files are hard-linked into OUT when on the same\n"
    "filesystem (copied otherwise, or when a shard must be renumbered), so the\n"
    "parts stay valid.  Parts packed with other options, by another version or\n"
    "from other inputs are refused.\n"
    "\n"
    "  --move    move the shard files instead (the parts are consumed)\n";

static const char *const usage_vocab =
    "usage: ctxshard vocab OUT\n"
    "\n"
    "Print the vocabulary of a packed dataset, one symbol a line in label order\n"
    "(label l is line l + 1): the file --vocab takes, so that the next split is\n"
    "numbered like this one:\n"
    "\n"
    "  ctxshard vocab train.cxs > vocab.txt\n"
    "  ctxshard import kaldi data/dev/feats.scp dev.cxs --text data/dev/text --vocab vocab.txt\n"
    "\n"
    "Exit status 1 for a features-only dataset (it has no vocabulary).\n";

static const char *const usage_verify =
    "usage: ctxshard verify OUT [--quiet]\n"
    "\n"
    "Re-hash every byte of the dataset against its XXH3 checksums, check zero\n"
    "padding and guard rows, finite features, labels inside the vocabulary and\n"
    "the stored statistics, recomputed from the data (count, mean and variance\n"
    "per dimension, label histogram).  Exit status 1 names the first problem,\n"
    "with the utterance where the format allows (a label, a chunk, an\n"
    "implausible feature value).\n";

static const char *const usage_info =
    "usage: ctxshard info OUT [--json]\n"
    "\n"
    "Print counts, dimensions, dtype, guard, shards, vocabulary, statistics,\n"
    "pack options and format version.  Of a URL it fetches the metadata\n"
    "alone (every shard's bytes but its features), within any cache limit\n"
    "that holds them.\n";

static const char *const usage_gather =
    "usage: ctxshard gather OUT --context K (--frames I,J,A-B,... | --all)\n"
    "                       --out X.npy [--labels Y.npy] [--normalize]\n"
    "                       [--stats-from TRAIN_OUT] [--threads N]\n"
    "\n"
    "Write the context windows of the given global frames as a float32 array\n"
    "[n, (2K+1)*D], zero-padded at utterance borders (any K), and their labels\n"
    "as int64 [n].  This is exactly what training sees.  OUT may also be a\n"
    "single shard file (frames numbered within it).\n"
    "\n"
    "  --normalize   (x - mean) / std with the dataset's stored statistics;\n"
    "                padding stays 0.  For dev and test, use train's:\n"
    "  --stats-from TRAIN_OUT\n"
    "                normalise with the statistics of another packed dataset\n"
    "                (the training split; same dimension); implies --normalize\n"
    "  --threads N   gather threads (default: all CPUs)\n";

static const char *const usage_gpu =
    "usage: ctxshard gpu [OUT] [--device N | --emulate] [--mode auto|stream|resident|pool]\n"
    "                  [--context K] [--batch B] [--batches M] [--budget SIZE]\n"
    "                  [--threads N] [--normalize] [--bf16] [--check] [--seed S] [--json]\n"
    "\n"
    "Without OUT: whether the GPU path can run here (built with CUDA, driver,\n"
    "device, memory, fast paths) and why not; exit status 3 when it cannot.\n"
    "With OUT: run the GPU loader over the dataset (shuffled) and print the mode\n"
    "it chose and why, the upload, and samples/s delivered into device memory.\n"
    "\n"
    "  --device N     CUDA device (default 0)\n"
    "  --emulate      run the GPU path on the host (no GPU needed)\n"
    "  --mode M       auto (default: resident when it fits the budget), stream,\n"
    "                 resident or pool\n"
    "  --context K    half-width of the windows (default 30)\n"
    "  --batch B      samples per batch (default 1024)\n"
    "  --batches M    batches to serve (default: one epoch)\n"
    "  --budget SIZE  device memory for resident data or the pool (default half\n"
    "                 the device's memory, at most 80%% of its free memory)\n"
    "  --threads N    CPU threads of the stream mode's loader\n"
    "  --normalize    normalise with the dataset's stored statistics\n"
    "  --bf16         deliver bfloat16 windows (resident and pool)\n"
    "  --check        read every batch back and compare it with the CPU gather,\n"
    "                 bit for bit (exit status 1 on a difference)\n"
    "  --json         one JSON object\n";
static const char *const usage_bench =
    "usage: ctxshard bench-read OUT [OUT2 ...] [--context K] [--batch B] [--threads N]\n"
    "                           [--batches M] [--sampler shuffle|sequential|weighted|block]\n"
    "                           [--memory SIZE] [--blocks N] [--seed S] [--hugepages SIZE]\n"
    "                           [--order-stats] [--no-stream]\n"
    "                           [--weights W1,W2,... | --temperature T] [--epoch-size N]\n"
    "\n"
    "Run the prefetching loader over OUT and print samples/s and GB/s of window\n"
    "data served (float32), with the time to open and to the first batch, and\n"
    "the bytes the process read from disk (/proc/self/io read_bytes).\n"
    "\n"
    "  --context K    half-width of the windows (default 30)\n"
    "  --batch B      samples per batch (default 1024)\n"
    "  --threads N    loader worker threads (default: min(CPUs, 4))\n"
    "  --batches M    batches to time (default 2000); epochs restart as needed\n"
    "  --sampler S    shuffle (default), sequential, weighted, or block (for data\n"
    "                 larger than memory: needs --memory)\n"
    "  --memory SIZE  block sampler: the page cache it may use (e.g. 1G)\n"
    "  --blocks N     block sampler: blocks a batch draws from (1..1024, default 8;\n"
    "                 blocks are SIZE/(N+1) bytes, one read ahead)\n"
    "  --hugepages SIZE  copy the features and labels into huge pages at open when\n"
    "                 they fit in SIZE (e.g. 4G), checked against their checksums,\n"
    "                 and serve from there; the output says whether, or why not\n"
    "  --order-stats  read nothing; say how random each order is: utterances per\n"
    "                 batch (mean, min) and the spread of an utterance's frames\n"
    "                 over the epoch, for sequential, shuffle and (with --memory)\n"
    "                 block order, with --batch and --seed\n"
    "  --no-stream    OUT a URL, block sampler: fetch the whole dataset into the\n"
    "                 cache first (by default only its metadata is fetched at open\n"
    "                 and the features block by block as the loader reads them)\n"
    "\n"
    "Several datasets: a mixture (shuffle, sequential or block sampler: with\n"
    "--memory, one budget shared by the datasets), each batch\n"
    "holding every dataset's share; prints the quotas and what each served.\n"
    "  --weights W1,W2,...  one weight per dataset (default: their frame counts)\n"
    "  --temperature T  without --weights: shares ~ frames^(1/T)\n"
    "  --epoch-size N   samples per epoch (default: all the datasets' frames)\n";

static const char *const usage_bench_utt =
    "usage: ctxshard bench-utt OUT [OUT2 ...] --frame-budget N [--threads N] [--buckets N]\n"
    "                          [--batches M] [--seed S] [--memory SIZE] [--blocks N]\n"
    "                          [--json] [--weights W1,W2,... | --temperature T]\n"
    "                          [--epoch-size N] [--stratify shares|length]\n"
    "\n"
    "Run the utterance loader over OUT (whole utterances padded to the longest of\n"
    "each batch, batches of at most N padded frames) twice on the same data:\n"
    "length-bucketed batches, then random batching (one bucket).  Prints for\n"
    "each utterances/s, frames/s (real frames), the padding overhead (padded\n"
    "frames / real frames), the time to create the sampler, to build an epoch's\n"
    "order, and to resume mid-epoch (a new sampler and one batch half-way).\n"
    "\n"
    "  --frame-budget N  padded frames a batch may hold (batch size x longest)\n"
    "  --threads N       loader worker threads (default: min(CPUs, 4))\n"
    "  --buckets N       length buckets of the bucketed run (1..1024; default:\n"
    "                    the library's choice)\n"
    "  --batches M       batches to time (default: one epoch)\n"
    "  --memory SIZE     block mode: bucket within blocks of whole utterances\n"
    "                    read in turn within SIZE of page cache (OUT a URL: streamed,\n"
    "                    its features fetched as the loader reads them)\n"
    "  --blocks N        block mode: blocks bucketed together (default 8)\n"
    "  --json            one JSON object\n"
    "\n"
    "Several datasets: a mixture (length-bucketed, shuffled), each batch holding\n"
    "every dataset's share; prints the quotas and what each served.  --memory\n"
    "reads every dataset in block order within that one budget.\n"
    "  --weights W1,W2,...  one weight per dataset (default: their utterance counts)\n"
    "  --temperature T   without --weights: shares ~ utterances^(1/T)\n"
    "  --epoch-size N    utterances per epoch (default: all the datasets')\n"
    "  --stratify S      shares (default): every batch holds the shares (each\n"
    "                    dataset's own length quantiles bucketed together);\n"
    "                    length: buckets by length over all, the least padding\n";

static const char *const usage_warm =
    "usage: ctxshard warm OUT [--force] [--quiet] [--json]\n"
    "\n"
    "Read every file of the dataset once, sequentially in large blocks, so that\n"
    "it sits in the page cache before training reads it at random (a cold\n"
    "shuffle otherwise faults it in window by window, far below the disk's\n"
    "rate).  Prints the bytes read and the rate.  When the part of the dataset\n"
    "not yet cached is larger than the memory available (MemAvailable, or the\n"
    "room under the memory cgroup limit; CTXSHARD_MEMORY_AVAILABLE overrides\n"
    "both), it reads nothing and says so: use the block sampler there.\n"
    "Exit status 3 when it does not fit.  Shards with block sums (format 1.3,\n"
    "pack's default) have every block checked against its sum as it is read:\n"
    "a damaged block stops it (exit 1), naming the utterances the block holds.\n"
    "\n"
    "  --force   warm even when it does not fit\n"
    "  --quiet   no progress bar, no summary\n"
    "  --json    the figures as one JSON object\n";

static const char *const usage_stats =
    "usage: ctxshard stats OUT [--html FILE] [--svg DIR] [--json] [--no-scan]\n"
    "                          [--examples N]\n"
    "       ctxshard stats --compare A B [same options]\n"
    "\n"
    "Look at a dataset before training on it: the label distribution (share per\n"
    "phoneme, imbalance ratio, the weights a weighted sampler would use), the\n"
    "utterance length histogram, per-dimension mean and standard deviation\n"
    "(flagging dimensions that look unnormalised), NaN/Inf and all-zero frames\n"
    "(one pass over the data unless --no-scan), and heatmaps of example\n"
    "utterances with their phoneme labels.  Text tables on the terminal;\n"
    "warnings at the end.\n"
    "\n"
    "  --html FILE    one self-contained HTML page with every chart\n"
    "  --svg DIR      the charts as standalone SVG files\n"
    "  --json         the figures as JSON instead of text\n"
    "  --no-scan      stored statistics only (no pass over the features)\n"
    "  --examples N   utterances shown as heatmaps (default 3)\n"
    "  --compare      two datasets side by side (e.g. train and dev), with a\n"
    "                 warning wherever they differ sharply\n";

enum {
    O_UTTS = 256, O_DIM, O_SEED, O_DTYPE, O_NOTRANS, O_QUIET, O_VOCAB, O_THREADS, O_GUARD,
    O_SHARD, O_ONERR, O_NORM, O_JSON, O_CONTEXT, O_FRAMES, O_ALL, O_OUT, O_LABELS, O_HELP,
    O_NORMFLAG, O_BATCH, O_BATCHES, O_SAMPLER, O_OFFSET, O_HTML, O_SVG, O_NOSCAN, O_EXAMPLES,
    O_COMPARE, O_COMPRESS, O_NOCOMPRESS, O_CHUNK, O_NOSHUFFLE, O_PART, O_MOVE, O_DEVICE,
    O_EMULATE, O_MODE, O_BUDGET, O_BF16, O_CHECK, O_MEMORY, O_FORCE, O_ORDERSTATS,
    O_BLOCKS, O_STATSFROM, O_SOS, O_EOS, O_FRAMEBUDGET, O_BUCKETS, O_TRANSCRIPTS, O_TEXT, O_ALI,
    O_NOSORT, O_FILL, O_BLOCKSUMS, O_HUGEPAGES, O_NOSTREAM, O_WEIGHTS, O_TEMPERATURE,
    O_EPOCHSIZE,
    O_STRATIFY, O_VOCABDATA
};

static const char *const usage_push =
    "usage: ctxshard push OUT URL [--quiet]\n"
    "\n"
    "Upload the packed dataset OUT to URL (s3://BUCKET/PREFIX, signed with\n"
    "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; or an http(s)://\n"
    "server that takes PUT, e.g. WebDAV) so that readers never see part of it:\n"
    "OUT is verified first (a damaged dataset is not uploaded), then its shards\n"
    "go up, four at a time, and manifest.cxs last, once every shard is there.\n"
    "Failed requests are retried (CTXSHARD_HTTP_RETRIES); 403 names the\n"
    "variables to check.  Push a new pack to a new prefix: readers that open\n"
    "the old manifest while its shards are being replaced fail their checks.\n"
    "\n"
    "  --quiet   no progress bar, no summary\n";

static const char *const usage_cache =
    "usage: ctxshard cache [ls|prune|clear] [--cache DIR] [--cache-limit SIZE] [--json]\n"
    "\n"
    "The node-local cache of datasets opened from URLs (every command that reads\n"
    "a dataset takes a URL, and --cache and --cache-limit).  ls (the default):\n"
    "each cached dataset, least recently used first, its size, last use, its URL\n"
    "and its directory; \"open\" when a process has it open now, \"partial\" when\n"
    "its download was cut short (the next open resumes it).  prune: evict the\n"
    "least recently used until the cache holds at most --cache-limit (or\n"
    "CTXSHARD_CACHE_LIMIT).  clear: evict everything.  A dataset open in any\n"
    "process is never evicted (exit 3 when it keeps the cache above the limit).\n"
    "\n"
    "  --cache DIR         the cache (default CTXSHARD_CACHE, else\n"
    "                      $XDG_CACHE_HOME/ctxshard, else ~/.cache/ctxshard)\n"
    "  --cache-limit SIZE  the budget (bytes, or with K, M, G, T); when a URL is\n"
    "                      opened, least recently used datasets are evicted to\n"
    "                      stay under it\n"
    "  --json              machine-readable output\n";

/* --cache DIR and --cache-limit SIZE, taken out of argv wherever they
 * stand: every command that opens a dataset reads them (through the
 * library's CTXSHARD_CACHE and CTXSHARD_CACHE_LIMIT).  0, or the exit
 * status of a usage error. */
static int take_cache_opts(int *argc, char **argv, const char **dir, uint64_t *limit,
                           int *have_limit) {
    int w = 1;
    for (int r = 1; r < *argc; r++) {
        const char *a = argv[r], *v = NULL;
        int is_dir = !strncmp(a, "--cache=", 8) || !strcmp(a, "--cache");
        int is_lim = !strncmp(a, "--cache-limit=", 14) || !strcmp(a, "--cache-limit");
        if (!is_dir && !is_lim) {
            argv[w++] = argv[r];
            continue;
        }
        if (strchr(a, '=')) v = strchr(a, '=') + 1;
        else if (r + 1 < *argc) v = argv[++r];
        if (!v || !*v) {
            fprintf(stderr, "ctxshard: %s needs a value\n", is_dir ? "--cache" : "--cache-limit");
            return EXIT_USAGE;
        }
        if (is_dir) {
            *dir = v;
            setenv("CTXSHARD_CACHE", v, 1);
        } else {
            if (parse_size(v, limit) || !*limit) {
                fprintf(stderr, "ctxshard: --cache-limit: '%s' is not a size (bytes, or with K, "
                        "M, G, T)\n", v);
                return EXIT_USAGE;
            }
            *have_limit = 1;
            setenv("CTXSHARD_CACHE_LIMIT", v, 1);
        }
    }
    *argc = w;
    argv[w] = NULL;
    return 0;
}

static const struct option longopts[] = {
    {"utts", required_argument, 0, O_UTTS},       {"dim", required_argument, 0, O_DIM},
    {"seed", required_argument, 0, O_SEED},       {"dtype", required_argument, 0, O_DTYPE},
    {"no-transcripts", no_argument, 0, O_NOTRANS}, {"quiet", no_argument, 0, O_QUIET},
    {"vocab", required_argument, 0, O_VOCAB},     {"threads", required_argument, 0, O_THREADS},
    {"guard", required_argument, 0, O_GUARD},     {"shard-size", required_argument, 0, O_SHARD},
    {"on-error", required_argument, 0, O_ONERR},  {"normalize", required_argument, 0, O_NORM},
    {"json", no_argument, 0, O_JSON},             {"context", required_argument, 0, O_CONTEXT},
    {"frames", required_argument, 0, O_FRAMES},   {"all", no_argument, 0, O_ALL},
    {"out", required_argument, 0, O_OUT},         {"labels", required_argument, 0, O_LABELS},
    {"help", no_argument, 0, O_HELP},             {"batch", required_argument, 0, O_BATCH},
    {"batches", required_argument, 0, O_BATCHES}, {"sampler", required_argument, 0, O_SAMPLER},
    {"offset", required_argument, 0, O_OFFSET},   {"html", required_argument, 0, O_HTML},
    {"svg", required_argument, 0, O_SVG},         {"no-scan", no_argument, 0, O_NOSCAN},
    {"examples", required_argument, 0, O_EXAMPLES}, {"compare", no_argument, 0, O_COMPARE},
    {"compress", required_argument, 0, O_COMPRESS}, {"no-compress", no_argument, 0, O_NOCOMPRESS},
    {"chunk-size", required_argument, 0, O_CHUNK}, {"no-shuffle", no_argument, 0, O_NOSHUFFLE},
    {"part", required_argument, 0, O_PART},       {"move", no_argument, 0, O_MOVE},
    {"device", required_argument, 0, O_DEVICE},   {"emulate", no_argument, 0, O_EMULATE},
    {"mode", required_argument, 0, O_MODE},       {"budget", required_argument, 0, O_BUDGET},
    {"bf16", no_argument, 0, O_BF16},             {"check", no_argument, 0, O_CHECK},
    {"memory", required_argument, 0, O_MEMORY},
    {"hugepages", required_argument, 0, O_HUGEPAGES},
    {"no-stream", no_argument, 0, O_NOSTREAM},
    {"weights", required_argument, 0, O_WEIGHTS},
    {"temperature", required_argument, 0, O_TEMPERATURE},
    {"epoch-size", required_argument, 0, O_EPOCHSIZE},
    {"stratify", required_argument, 0, O_STRATIFY},
    {"force", no_argument, 0, O_FORCE},
    {"order-stats", no_argument, 0, O_ORDERSTATS},
    {"blocks", required_argument, 0, O_BLOCKS},
    {"stats-from", required_argument, 0, O_STATSFROM},
    {"frame-budget", required_argument, 0, O_FRAMEBUDGET},
    {"buckets", required_argument, 0, O_BUCKETS},
    {"sos", required_argument, 0, O_SOS},         {"eos", required_argument, 0, O_EOS},
    {"transcripts", required_argument, 0, O_TRANSCRIPTS},
    {"text", required_argument, 0, O_TEXT},       {"ali", required_argument, 0, O_ALI},
    {"no-sort", no_argument, 0, O_NOSORT},
    {"vocab-from-data", no_argument, 0, O_VOCABDATA},
    {"fill-nonfinite", no_argument, 0, O_FILL},
    {"block-sums", required_argument, 0, O_BLOCKSUMS},
    {0, 0, 0, 0}};

/* Options a command accepts, by enum value. */
static int allowed(const char *cmd, int opt) {
    static const struct {
        const char *cmd;
        int opts[24];
    } table[] = {
        {"synth", {O_UTTS, O_DIM, O_SEED, O_DTYPE, O_NOTRANS, O_QUIET, O_OFFSET, O_TRANSCRIPTS}},
        {"check", {O_VOCAB, O_THREADS, O_QUIET, O_SOS, O_EOS, O_TRANSCRIPTS, O_FILL}},
        {"pack", {O_DTYPE, O_GUARD, O_SHARD, O_THREADS, O_ONERR, O_NORM, O_VOCAB, O_QUIET,
                  O_COMPRESS, O_CHUNK, O_NOSHUFFLE, O_PART, O_SOS, O_EOS, O_TRANSCRIPTS, O_FILL,
                  O_BLOCKSUMS}},
        {"import", {O_DTYPE, O_GUARD, O_SHARD, O_THREADS, O_ONERR, O_NORM, O_VOCAB, O_QUIET,
                    O_COMPRESS, O_CHUNK, O_NOSHUFFLE, O_TEXT, O_ALI, O_NOSORT, O_PART,
                    O_BLOCKSUMS, O_VOCABDATA}},
        {"convert", {O_COMPRESS, O_NOCOMPRESS, O_CHUNK, O_NOSHUFFLE, O_QUIET, O_THREADS,
                     O_BLOCKSUMS, O_DTYPE}},
        {"merge", {O_MOVE, O_QUIET}},
        {"verify", {O_QUIET}},
        {"info", {O_JSON}},
        {"gather", {O_CONTEXT, O_FRAMES, O_ALL, O_OUT, O_LABELS, O_NORMFLAG, O_THREADS,
                    O_STATSFROM}},
        {"bench-read", {O_CONTEXT, O_BATCH, O_THREADS, O_BATCHES, O_SAMPLER, O_SEED, O_MEMORY,
                        O_ORDERSTATS, O_BLOCKS, O_HUGEPAGES, O_NOSTREAM, O_WEIGHTS,
                        O_TEMPERATURE, O_EPOCHSIZE}},
        {"bench-utt", {O_FRAMEBUDGET, O_THREADS, O_BUCKETS, O_BATCHES, O_SEED, O_MEMORY,
                       O_BLOCKS, O_JSON, O_WEIGHTS, O_TEMPERATURE, O_EPOCHSIZE, O_STRATIFY}},
        {"warm", {O_FORCE, O_QUIET, O_JSON}},
        {"stats", {O_HTML, O_SVG, O_JSON, O_NOSCAN, O_EXAMPLES, O_COMPARE}},
        {"gpu", {O_DEVICE, O_EMULATE, O_MODE, O_CONTEXT, O_BATCH, O_BATCHES, O_BUDGET, O_THREADS,
                 O_NORMFLAG, O_BF16, O_CHECK, O_SEED, O_JSON}},
    };
    if (opt == O_HELP) return 1;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strcmp(table[i].cmd, cmd) == 0)
            for (int j = 0; j < 24 && table[i].opts[j]; j++)
                if (table[i].opts[j] == opt) return 1;
    return 0;
}

static int usage_error(const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int usage_error(const char *usage, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("ctxshard: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fputs(usage, stderr);
    return EXIT_USAGE;
}

/* "1,2,10-20" into a list. */
static int parse_frames(const char *s, uint64_t **out, size_t *n) {
    size_t cap = 64;
    uint64_t *v = malloc(cap * sizeof *v);
    *n = 0;
    if (!v) return -1;
    char *copy = strdup(s), *save = NULL;
    if (!copy) {
        free(v);
        return -1;
    }
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint64_t a, b;
        char *dash = strchr(tok, '-');
        if (dash) *dash = 0;
        if (parse_u64(tok, &a) || (dash ? parse_u64(dash + 1, &b) : (b = a, 0)) || b < a ||
            b - a > (1ull << 32)) {
            free(copy);
            free(v);
            return -1;
        }
        for (uint64_t x = a; x <= b; x++) {
            if (*n == cap) {
                uint64_t *nv = realloc(v, 2 * cap * sizeof *nv);
                if (!nv) {
                    free(copy);
                    free(v);
                    return -1;
                }
                v = nv;
                cap *= 2;
            }
            v[(*n)++] = x;
        }
    }
    free(copy);
    if (*n == 0) {
        free(v);
        return -1;
    }
    *out = v;
    return 0;
}

/* A coded dtype stores no guard rows (its reader pads windows): the
 * guard is 0, and a --guard that asked for some hears why. */
static void coded_guard(pack_opts *po) {
    const uint32_t g = cxs_stored_guard(po->dtype, po->guard);
    if (g == po->guard) return;
    if (po->guard_set)
        warnx_("--guard %u: a %s dataset stores no guard rows (its windows are zero-padded "
               "when read); guard 0", po->guard, cxs_dtype_name(po->dtype));
    po->guard = g;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(usage_top, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("ctxshard %s (format %d.%d)\n", CXS_VERSION_STRING, CXS_FORMAT_MAJOR,
               CXS_FORMAT_MINOR);
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(usage_top, stdout);
        return 0;
    }
    const char *cache_dir = NULL;
    uint64_t cache_limit = 0;
    int have_limit = 0, ec0 = take_cache_opts(&argc, argv, &cache_dir, &cache_limit, &have_limit);
    if (ec0) return ec0;
    if (!strcmp(cmd, "push")) {
        const char *pos[2] = {NULL, NULL};
        int np = 0, quiet = 0;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) quiet = 1;
            else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                fputs(usage_push, stdout);
                return 0;
            } else if (argv[i][0] == '-' || np == 2)
                return usage_error(usage_push, "unexpected argument '%s'", argv[i]);
            else
                pos[np++] = argv[i];
        }
        if (np != 2) return usage_error(usage_push, "expected OUT and URL");
        return push_run(pos[0], pos[1], quiet);
    }
    if (!strcmp(cmd, "cache")) {
        const char *verb = "ls";
        int json = 0;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "--json")) json = 1;
            else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
                fputs(usage_cache, stdout);
                return 0;
            } else if (i == 2 && (!strcmp(argv[i], "ls") || !strcmp(argv[i], "prune") ||
                                  !strcmp(argv[i], "clear")))
                verb = argv[i];
            else
                return usage_error(usage_cache, "'%s' is not ls, prune, clear or --json", argv[i]);
        }
        return cache_run(verb, cache_dir, cache_limit, have_limit, json);
    }
    const char *usage = !strcmp(cmd, "synth")    ? usage_synth
                        : !strcmp(cmd, "check")  ? usage_check
                        : !strcmp(cmd, "pack")   ? usage_pack
                        : !strcmp(cmd, "convert") ? usage_convert
                        : !strcmp(cmd, "import") ? usage_import
                        : !strcmp(cmd, "merge")  ? usage_merge
                        : !strcmp(cmd, "verify") ? usage_verify
                        : !strcmp(cmd, "info")   ? usage_info
                        : !strcmp(cmd, "vocab")  ? usage_vocab
                        : !strcmp(cmd, "gather") ? usage_gather
                        : !strcmp(cmd, "bench-read") ? usage_bench
                        : !strcmp(cmd, "bench-utt")  ? usage_bench_utt
                        : !strcmp(cmd, "stats")      ? usage_stats
                        : !strcmp(cmd, "warm")       ? usage_warm
                        : !strcmp(cmd, "gpu")        ? usage_gpu
                                                 : NULL;
    if (!usage) {
        fprintf(stderr, "ctxshard: unknown command '%s'\n", cmd);
        fputs(usage_top, stderr);
        return EXIT_USAGE;
    }
    synth_opts so = {100, 0, 28, 0, 0, 1, 0};
    pack_opts po = {CXS_DTYPE_F32, DEFAULT_GUARD, DEFAULT_SHARD_SIZE, 0, 0, CXS_NORM_NONE, NULL, 0,
                    CXS_COMPRESSION_NONE, DEFAULT_LEVEL, DEFAULT_CHUNK_SIZE, 1, 0, 0, 0, NULL, NULL,
                    CXS_TRANSCRIPTS_FRAMES, 0, 0, 0, 0, 0};
    int move = 0, have_form = 0, part_env = 0;
    int json = 0, all = 0, have_k = 0;
    bench_read_opts bo = {.k = 30, .batch = 1024, .sampler = CXS_SAMPLER_SHUFFLE, .batches = 2000};
    stats_opts sto = {NULL, NULL, NULL, 0, 1, 3};
    bench_utt_opts bu;
    memset(&bu, 0, sizeof bu);
    gpu_cmd_opts go = {0, CXS_GPU_AUTO, 30, 1024, 0, 0, 0, 0, 0, 0, 0, 0};
    int compare = 0, force = 0, batches_given = 0, stratify_given = 0;
    uint64_t k = 0, v;
    uint64_t *frames = NULL;
    size_t nframes = 0;
    const char *out = NULL, *labels = NULL, *stats_from = NULL;
    import_opts io = {NULL, NULL, 0, 0};
    optind = 2;
    if (!strcmp(cmd, "import")) {
        /* `import FORMAT ...`: the format first */
        if (argc < 3 || !strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) {
            fputs(usage, argc < 3 ? stderr : stdout);
            return argc < 3 ? EXIT_USAGE : 0;
        }
        if (strcmp(argv[2], "kaldi") && strcmp(argv[2], "hdf5"))
            return usage_error(usage, "import: unknown format '%s' (kaldi or hdf5)", argv[2]);
        optind = 3;
    }
    int c;
    /* gather's --normalize is a flag; pack's takes a mode. */
    struct option opts[sizeof longopts / sizeof *longopts];
    memcpy(opts, longopts, sizeof opts);
    if (!strcmp(cmd, "gather") || !strcmp(cmd, "gpu"))
        for (size_t i = 0; opts[i].name; i++)
            if (!strcmp(opts[i].name, "normalize")) {
                opts[i].has_arg = no_argument;
                opts[i].val = O_NORMFLAG;
            }
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == '?') {
            fputs(usage, stderr);
            return EXIT_USAGE;
        }
        if (!allowed(cmd, c)) return usage_error(usage, "option %s does not apply here", argv[optind - 1]);
        switch (c) {
        case O_HELP: fputs(usage, stdout); return 0;
        case O_UTTS:
            if (parse_u64(optarg, &so.utts) || so.utts == 0 || so.utts > 10000000)
                return usage_error(usage, "--utts: '%s' is not a count in 1..10000000", optarg);
            break;
        case O_DIM:
            if (parse_u64(optarg, &v) || v == 0 || v > 4096)
                return usage_error(usage, "--dim: '%s' is not in 1..4096", optarg);
            so.dim = (uint32_t)v;
            break;
        case O_SEED:
            if (parse_u64(optarg, &so.seed)) return usage_error(usage, "--seed: '%s' is not a number", optarg);
            break;
        case O_DTYPE:
            if (!strcmp(cmd, "synth")) {
                if (!strcmp(optarg, "f32")) so.f64 = 0;
                else if (!strcmp(optarg, "f64")) so.f64 = 1;
                else return usage_error(usage, "--dtype: '%s' is not f32 or f64", optarg);
            } else {
                if (!strcmp(optarg, "f32")) po.dtype = CXS_DTYPE_F32;
                else if (!strcmp(optarg, "f16")) po.dtype = CXS_DTYPE_F16;
                else if (!strcmp(optarg, "bf16")) po.dtype = CXS_DTYPE_BF16;
                else if (!strcmp(optarg, "q8")) po.dtype = CXS_DTYPE_Q8;
                else if (!strcmp(optarg, "q16")) po.dtype = CXS_DTYPE_Q16;
                else return usage_error(usage, "--dtype: '%s' is not f32, f16, bf16, q8 or q16", optarg);
                po.dtype_set = 1;
            }
            break;
        case O_NOTRANS: so.transcripts = 0; break;
        case O_FILL:
            po.fill_nonfinite = 1;
            break;
        case O_TRANSCRIPTS:
            if (!strcmp(cmd, "synth")) {
                if (!strcmp(optarg, "frames")) so.transcripts = 1;
                else if (!strcmp(optarg, "sequence")) so.transcripts = 2;
                else return usage_error(usage, "--transcripts: '%s' is not frames or sequence", optarg);
            } else {
                if (!strcmp(optarg, "frames")) po.transcripts = CXS_TRANSCRIPTS_FRAMES;
                else if (!strcmp(optarg, "sequence")) po.transcripts = CXS_TRANSCRIPTS_SEQUENCE;
                else if (!strcmp(optarg, "both")) po.transcripts = CXS_TRANSCRIPTS_BOTH;
                else return usage_error(usage, "--transcripts: '%s' is not frames, sequence or both", optarg);
            }
            break;
        case O_OFFSET:
            if (parse_u64(optarg, &so.offset) || so.offset > 1000000000)
                return usage_error(usage, "--offset: '%s' is not in 0..1000000000", optarg);
            break;
        case O_QUIET: so.quiet = po.quiet = 1; break;
        case O_VOCAB: po.vocab_path = optarg; break;
        case O_SOS: po.sos = optarg; break;
        case O_EOS: po.eos = optarg; break;
        case O_THREADS:
            if (parse_u64(optarg, &v) || v == 0 || v > 1024)
                return usage_error(usage, "--threads: '%s' is not in 1..1024", optarg);
            po.threads = (unsigned)v;
            break;
        case O_GUARD:
            if (parse_u64(optarg, &v) || v > 4096)
                return usage_error(usage, "--guard: '%s' is not in 0..4096", optarg);
            po.guard = (uint32_t)v;
            po.guard_set = 1;
            break;
        case O_SHARD:
            po.shard_size_set = 1;
            if (parse_size(optarg, &po.shard_size) || po.shard_size < MIN_SHARD_SIZE)
                return usage_error(usage, "--shard-size: '%s' is not a size of at least 16K", optarg);
            break;
        case O_ONERR:
            if (!strcmp(optarg, "fail")) po.skip_bad = 0;
            else if (!strcmp(optarg, "skip")) po.skip_bad = 1;
            else return usage_error(usage, "--on-error: '%s' is not fail or skip", optarg);
            break;
        case O_NORMFLAG:
            po.normalize = 1;
            break;
        case O_STATSFROM: stats_from = optarg; break;
        case O_NORM:
            if (!strcmp(optarg, "none")) po.normalize = CXS_NORM_NONE;
            else if (!strcmp(optarg, "utterance")) po.normalize = CXS_NORM_UTTERANCE;
            else return usage_error(usage, "--normalize: '%s' is not none or utterance", optarg);
            break;
        case O_JSON: json = 1; break;
        case O_CONTEXT:
            if (parse_u64(optarg, &k) || k > 100000)
                return usage_error(usage, "--context: '%s' is not in 0..100000", optarg);
            have_k = 1;
            break;
        case O_FRAMES:
            free(frames);
            if (parse_frames(optarg, &frames, &nframes))
                return usage_error(usage, "--frames: '%s' is not a list like 0,5,10-20", optarg);
            break;
        case O_ALL: all = 1; break;
        case O_HTML: sto.html = optarg; break;
        case O_SVG: sto.svg_dir = optarg; break;
        case O_NOSCAN: sto.scan = 0; break;
        case O_COMPARE: compare = 1; break;
        case O_EXAMPLES:
            if (parse_u64(optarg, &v) || v > 8)
                return usage_error(usage, "--examples: '%s' is not in 0..8", optarg);
            sto.examples = (unsigned)v;
            break;
        case O_BATCH:
            if (parse_u64(optarg, &v) || v == 0 || v > (1u << 24))
                return usage_error(usage, "--batch: '%s' is not in 1..16777216", optarg);
            bo.batch = (uint32_t)v;
            break;
        case O_BATCHES:
            if (parse_u64(optarg, &bo.batches) || bo.batches == 0)
                return usage_error(usage, "--batches: '%s' is not a positive count", optarg);
            batches_given = 1;
            break;
        case O_SAMPLER:
            if (!strcmp(optarg, "shuffle")) bo.sampler = CXS_SAMPLER_SHUFFLE;
            else if (!strcmp(optarg, "sequential")) bo.sampler = CXS_SAMPLER_SEQUENTIAL;
            else if (!strcmp(optarg, "weighted")) bo.sampler = CXS_SAMPLER_WEIGHTED;
            else if (!strcmp(optarg, "block")) bo.sampler = CXS_SAMPLER_BLOCK;
            else return usage_error(usage, "--sampler: '%s' is not shuffle, sequential, weighted or block", optarg);
            break;
        case O_MEMORY:
            if (parse_size(optarg, &bo.memory) || !bo.memory)
                return usage_error(usage, "--memory: '%s' is not a size (bytes, or with K, M, G)", optarg);
            break;
        case O_HUGEPAGES:
            if (parse_size(optarg, &bo.hugepages) || !bo.hugepages)
                return usage_error(usage, "--hugepages: '%s' is not a size (bytes, or with K, M, G)", optarg);
            break;
        case O_NOSTREAM:
            bo.no_stream = 1;
            break;
        case O_WEIGHTS: {
            const char *at = optarg;
            bo.nweights = 0;
            while (*at) {
                char *end;
                double w = strtod(at, &end);
                if (end == at || !(w >= 0) || w > 1e300 || bo.nweights == CXS_MIX_MAX_SOURCES ||
                    (*end && *end != ','))
                    return usage_error(usage, "--weights: '%s' is not a list of numbers >= 0 "
                                       "(e.g. 3,1,1), one per dataset", optarg);
                bo.weights[bo.nweights++] = w;
                at = *end ? end + 1 : end;
            }
            if (!bo.nweights) return usage_error(usage, "%s", "--weights: no weights given");
            break;
        }
        case O_TEMPERATURE: {
            char *end;
            bo.temperature = strtod(optarg, &end);
            if (end == optarg || *end || !(bo.temperature > 0) || bo.temperature > 1e6)
                return usage_error(usage, "--temperature: '%s' is not a number above 0", optarg);
            break;
        }
        case O_EPOCHSIZE:
            if (parse_u64(optarg, &bo.epoch_size) || !bo.epoch_size)
                return usage_error(usage, "--epoch-size: '%s' is not a sample count", optarg);
            break;
        case O_STRATIFY:
            if (!strcmp(optarg, "shares")) bu.stratify = CXS_MIX_STRATIFY_SHARES;
            else if (!strcmp(optarg, "length")) bu.stratify = CXS_MIX_STRATIFY_LENGTH;
            else return usage_error(usage, "--stratify: '%s' is not shares or length", optarg);
            stratify_given = 1;
            break;
        case O_BLOCKS:
            if (parse_u64(optarg, &v) || v < 1 || v > 1024)
                return usage_error(usage, "--blocks: '%s' is not a count in 1..1024", optarg);
            bo.blocks = (uint32_t)v;
            break;
        case O_OUT: out = optarg; break;
        case O_COMPRESS: {
            char *end;
            have_form = 1;
            po.compress = CXS_COMPRESSION_ZSTD;
            if (!strcmp(optarg, "zstd")) break;
            long lv = strncmp(optarg, "zstd:", 5) ? -1 : strtol(optarg + 5, &end, 10);
            if (lv < 1 || lv > 19 || *end)
                return usage_error(usage, "--compress: '%s' is not zstd or zstd:LEVEL (1..19)", optarg);
            po.level = (int)lv;
            break;
        }
        case O_NOCOMPRESS:
            have_form = 1;
            po.compress = CXS_COMPRESSION_NONE;
            break;
        case O_CHUNK:
            if (parse_size(optarg, &po.chunk_size) || po.chunk_size < 1 ||
                po.chunk_size > (64ull << 20))
                return usage_error(usage, "--chunk-size: '%s' is not a size in 1..64M", optarg);
            break;
        case O_NOSHUFFLE: po.shuffle = 0; break;
        case O_BLOCKSUMS:
            if (strcmp(optarg, "on") && strcmp(optarg, "off"))
                return usage_error(usage, "--block-sums: '%s' is not on or off", optarg);
            po.no_block_sums = !strcmp(optarg, "off");
            break;
        case O_PART: {
            unsigned pi, pn;
            char tail;
            part_env = !strcmp(optarg, "env");
            if (part_env) break;
            if (sscanf(optarg, "%u/%u%c", &pi, &pn, &tail) != 2 || pn < 1 || pn > 100000 ||
                pi < 1 || pi > pn)
                return usage_error(usage, "--part: '%s' is not I/N with 1 <= I <= N <= 100000, or env", optarg);
            po.part = pi;
            po.parts = pn;
            break;
        }
        case O_MOVE: move = 1; break;
        case O_DEVICE:
            if (parse_u64(optarg, &v) || v > 1024)
                return usage_error(usage, "--device: '%s' is not a device number", optarg);
            go.device = (int32_t)v;
            break;
        case O_EMULATE: go.device = CXS_GPU_EMULATE; break;
        case O_MODE:
            if (!strcmp(optarg, "auto")) go.mode = CXS_GPU_AUTO;
            else if (!strcmp(optarg, "stream")) go.mode = CXS_GPU_STREAM;
            else if (!strcmp(optarg, "resident")) go.mode = CXS_GPU_RESIDENT;
            else if (!strcmp(optarg, "pool")) go.mode = CXS_GPU_POOL;
            else return usage_error(usage, "--mode: '%s' is not auto, stream, resident or pool", optarg);
            break;
        case O_BUDGET:
            if (parse_size(optarg, &go.budget) || !go.budget)
                return usage_error(usage, "--budget: '%s' is not a size", optarg);
            break;
        case O_FRAMEBUDGET:
            if (parse_u64(optarg, &bu.frame_budget) || !bu.frame_budget)
                return usage_error(usage, "--frame-budget: '%s' is not a positive count of frames", optarg);
            break;
        case O_BUCKETS:
            if (parse_u64(optarg, &v) || v < 1 || v > 1024)
                return usage_error(usage, "--buckets: '%s' is not a count in 1..1024", optarg);
            bu.buckets = (uint32_t)v;
            break;
        case O_BF16: go.bf16 = 1; break;
        case O_CHECK: go.check = 1; break;
        case O_FORCE: force = 1; break;
        case O_ORDERSTATS: bo.order_stats = 1; break;
        case O_LABELS: labels = optarg; break;
        case O_TEXT: io.text = optarg; break;
        case O_ALI: io.ali = optarg; break;
        case O_NOSORT: io.no_sort = 1; break;
        case O_VOCABDATA: io.vocab_from_data = 1; break;
        default: break;
        }
    }
    if (!strcmp(cmd, "merge")) {
        free(frames);
        if (argc - optind < 2) return usage_error(usage, "%s", "expected at least one PART and OUT");
        return merge_run(argv + optind, argc - optind - 1, argv[argc - 1], move, po.quiet);
    }
    if (!strcmp(cmd, "import")) {
        free(frames);
        const int hdf5 = !strcmp(argv[2], "hdf5");
        if (argc - optind != 2)
            return usage_error(usage, "%s", hdf5 ? "expected FILE.h5 and OUT" : "expected SCP_OR_ARK and OUT");
        if (hdf5 && (io.text || io.ali || po.vocab_path || io.no_sort || po.parts || part_env ||
                     io.vocab_from_data))
            return usage_error(usage, "%s", "import hdf5 takes features only, whole (--text, "
                                            "--ali, --vocab, --vocab-from-data, --no-sort and "
                                            "--part are kaldi's)");
        if (part_env) {
            char from[256], err[512];
            if (part_from_env(&po.part, &po.parts, from, sizeof from, err, sizeof err)) {
                warnx_("--part env: %s", err);
                return EXIT_USAGE;
            }
            if (!po.quiet) fprintf(stderr, "ctxshard import: part %u/%u (%s)\n", po.part, po.parts, from);
        }
        if (io.text && io.ali)
            return usage_error(usage, "%s", "give --text or --ali, not both (one vocabulary "
                                            "per dataset)");
        if ((po.vocab_path || io.vocab_from_data) && !io.text && !io.ali)
            return usage_error(usage, "%s", po.vocab_path ? "--vocab applies with --text or --ali"
                                            : "--vocab-from-data applies with --text or --ali");
        if (po.vocab_path && io.vocab_from_data)
            return usage_error(usage, "%s", "give --vocab FILE or --vocab-from-data, not both");
        if (!hdf5 && (io.text || io.ali) && !po.vocab_path && !io.vocab_from_data) {
            /* a split numbered by its own symbols would not agree with the
             * others: the numbering is the user's to give */
            warnx_("%s: labels need a vocabulary: give --vocab FILE, the training split's "
                   "(ctxshard vocab TRAIN.cxs > vocab.txt) or a Kaldi symbol table (%s), or "
                   "--vocab-from-data to number the symbols this file holds (another split "
                   "numbered so may give its labels other meanings); nothing written",
                   io.text ? io.text : io.ali,
                   io.text ? "data/lang/words.txt" : "data/lang/phones.txt");
            return EXIT_USAGE;
        }
        if (!po.threads) po.threads = cxs_cpu_count();
        coded_guard(&po);
        if (hdf5) return import_hdf5_run(argv[optind], argv[optind + 1], &po);
        return import_kaldi_run(argv[optind], argv[optind + 1], &po, &io);
    }
    if (!strcmp(cmd, "gpu")) {
        free(frames);
        if (argc - optind > 1) return usage_error(usage, "%s", "expected at most one directory");
        if (have_k) go.k = (uint32_t)k;
        go.batch = bo.batch;
        go.batches = bo.batches == 2000 ? 0 : bo.batches;
        go.threads = po.threads;
        go.normalize = po.normalize;
        go.seed = so.seed;
        go.json = json;
        return gpu_cmd_run(argc > optind ? argv[optind] : NULL, &go);
    }
    if (!strcmp(cmd, "bench-read") && (argc - optind > 1 || bo.nweights || bo.temperature > 0 ||
                                       bo.epoch_size)) {
        free(frames);
        if (argc - optind < 1) return usage_error(usage, "%s", "expected the datasets to mix");
        if (bo.nweights && bo.temperature > 0)
            return usage_error(usage, "%s", "--weights and --temperature exclude each other");
        if (bo.nweights && bo.nweights != (uint32_t)(argc - optind))
            return usage_error(usage, "--weights: %u weights for %d datasets (one each)",
                               bo.nweights, argc - optind);
        if (bo.sampler == CXS_SAMPLER_WEIGHTED)
            return usage_error(usage, "%s", "a mixture is read with --sampler shuffle, "
                               "sequential or block (weighted sampling is not available for "
                               "mixtures)");
        if (bo.sampler == CXS_SAMPLER_BLOCK && !bo.memory)
            return usage_error(usage, "%s", "--sampler block needs --memory SIZE (the page "
                               "cache all the datasets may use)");
        if (bo.sampler != CXS_SAMPLER_BLOCK && (bo.memory || bo.blocks))
            return usage_error(usage, "%s", "--memory and --blocks apply to --sampler block");
        if (bo.order_stats || bo.hugepages)
            return usage_error(usage, "%s", "--order-stats and --hugepages do not apply to a "
                               "mixture");
        bo.k = have_k ? (uint32_t)k : 30;
        bo.threads = po.threads ? po.threads : cxs_default_threads();
        bo.seed = so.seed;
        return bench_mix_run(argc - optind, argv + optind, &bo);
    }
    if (!strcmp(cmd, "bench-utt") && (argc - optind > 1 || bo.nweights || bo.temperature > 0 ||
                                      bo.epoch_size || stratify_given)) {
        free(frames);
        if (argc - optind < 1) return usage_error(usage, "%s", "expected the datasets to mix");
        if (!bu.frame_budget) return usage_error(usage, "%s", "--frame-budget N is required");
        if (bo.nweights && bo.temperature > 0)
            return usage_error(usage, "%s", "--weights and --temperature exclude each other");
        if (bo.nweights && bo.nweights != (uint32_t)(argc - optind))
            return usage_error(usage, "--weights: %u weights for %d datasets (one each)",
                               bo.nweights, argc - optind);
        if (json) return usage_error(usage, "%s", "--json does not apply to a mixture");
        if (bo.blocks && !bo.memory)
            return usage_error(usage, "%s", "--blocks applies with --memory (block mode) only");
        bu.memory = bo.memory;
        bu.blocks = bo.blocks;
        bu.threads = po.threads ? po.threads : cxs_default_threads();
        bu.seed = so.seed;
        bu.batches = bo.batches == 2000 && !batches_given ? 0 : bo.batches;
        bu.weights = bo.weights;
        bu.nweights = bo.nweights;
        bu.temperature = bo.temperature;
        bu.epoch_size = bo.epoch_size;
        return bench_utt_mix_run(argc - optind, argv + optind, &bu);
    }
    int need = !strcmp(cmd, "pack") || !strcmp(cmd, "convert") || compare ? 2 : 1;
    if (!strcmp(cmd, "convert") && !have_form && !po.dtype_set) {
        free(frames);
        return usage_error(usage, "%s", "give --compress zstd[:LEVEL], --no-compress or --dtype");
    }
    po.keep_form = !have_form;
    if (argc - optind != need) {
        free(frames);
        return usage_error(usage, "%s", compare ? "--compare expects two datasets"
                                        : need == 2 ? (strcmp(cmd, "convert") ? "expected RAW and OUT" : "expected IN and OUT")
                                                    : "expected one directory");
    }
    const char *a = argv[optind], *b = need == 2 ? argv[optind + 1] : NULL;
    if (!strcmp(cmd, "bench-read")) {
        bo.k = have_k ? (uint32_t)k : 30;
        bo.threads = po.threads ? po.threads : cxs_default_threads();
        bo.seed = so.seed;
    }
    if (!strcmp(cmd, "bench-utt")) {
        if (!bu.frame_budget) {
            free(frames);
            return usage_error(usage, "%s", "--frame-budget N is required");
        }
        bu.threads = po.threads ? po.threads : cxs_default_threads();
        bu.seed = so.seed;
        bu.batches = bo.batches == 2000 && !batches_given ? 0 : bo.batches;
        bu.memory = bo.memory;
        bu.blocks = bo.blocks;
        bu.json = json;
        if (bu.blocks && !bu.memory) {
            free(frames);
            return usage_error(usage, "%s", "--blocks applies with --memory (block mode) only");
        }
    }
    if (part_env) {
        char from[256], err[512];
        if (part_from_env(&po.part, &po.parts, from, sizeof from, err, sizeof err)) {
            free(frames);
            warnx_("--part env: %s", err);
            return EXIT_USAGE;
        }
        if (!po.quiet) fprintf(stderr, "ctxshard pack: part %u/%u (%s)\n", po.part, po.parts, from);
    }
    if (!po.threads) po.threads = cxs_cpu_count();
    coded_guard(&po);
    int ec;
    if (!strcmp(cmd, "synth")) ec = synth_run(a, &so);
    else if (!strcmp(cmd, "check"))
        ec = (ec = raw_path_hint(cmd, a, NULL)) ? ec : check_run(a, &po);
    else if (!strcmp(cmd, "pack")) ec = (ec = raw_path_hint(cmd, a, b)) ? ec : pack_run(a, b, &po);
    else if (!strcmp(cmd, "convert")) ec = convert_run(a, b, &po);
    else if (!strcmp(cmd, "verify")) ec = verify_run(a, po.quiet);
    else if (!strcmp(cmd, "info")) ec = info_run(a, json);
    else if (!strcmp(cmd, "vocab")) ec = vocab_run(a);
    else if (!strcmp(cmd, "bench-read"))
        ec = bo.order_stats ? order_stats_run(a, &bo) : bench_read_run(a, &bo);
    else if (!strcmp(cmd, "bench-utt")) ec = bench_utt_run(a, &bu);
    else if (!strcmp(cmd, "warm")) ec = warm_run(a, force, po.quiet, json);
    else if (!strcmp(cmd, "stats")) {
        if (json) sto.json = 1;
        sto.compare = compare ? b : NULL;
        ec = stats_run(a, &sto);
    }
    else {
        if (!have_k) ec = usage_error(usage, "%s", "--context K is required");
        else if (!out) ec = usage_error(usage, "%s", "--out X.npy is required");
        else if (all == (frames != NULL)) ec = usage_error(usage, "%s", "give exactly one of --frames and --all");
        else ec = gather_run(a, (uint32_t)k, frames, nframes, all, out, labels, po.normalize,
                             stats_from, po.threads);
    }
    free(frames);
    return ec;
}
