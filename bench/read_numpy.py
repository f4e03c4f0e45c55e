"""The best hand-written Python reader, for bench/read.py: the course
recitation's approach.  Load every utterance at init, pad each with k zero
rows on both sides (no bleeding across utterances), concatenate, precompute
each frame's window start; a batch is one numpy fancy-indexing gather,
x[rows[idx, None] + offsets].  Prints "key value" lines.

usage: read_numpy.py RAW K BATCH BATCHES REPEATS"""
import os
import statistics
import sys
import time

import numpy as np

PHONEMES = ["[SIL]", "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER",
            "EY", "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P",
            "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH", "[SOS]", "[EOS]"]


def rss_anon_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return -1


def main(raw, k, B, batches, reps):
    t0 = time.perf_counter()
    index = {p: i for i, p in enumerate(PHONEMES)}
    ids = sorted(n[:-4] for n in os.listdir(os.path.join(raw, "mfcc")))
    parts, labels, rows = [], [], []
    offset = 0
    for uid in ids:
        x = np.load(os.path.join(raw, "mfcc", uid + ".npy"))
        t = np.load(os.path.join(raw, "transcript", uid + ".npy"))[1:-1]
        T = len(x)
        parts.append(np.pad(x, ((k, k), (0, 0))))
        labels.append(np.array([index[p] for p in t], dtype=np.int64))
        rows.append(offset + np.arange(T))  # window of frame j starts at padded row offset+j
        offset += T + 2 * k
    X = np.concatenate(parts)
    Y = np.concatenate(labels)
    R = np.concatenate(rows)
    del parts
    offsets = np.arange(2 * k + 1)
    rng = np.random.default_rng(1)
    idx = rng.integers(0, len(R), B)
    xb = X[R[idx, None] + offsets].reshape(B, -1)
    yb = Y[idx]
    t_first = time.perf_counter() - t0
    print(f"numpy_init_first_batch_ms {t_first * 1e3:.1f}")
    print(f"numpy_rss_anon_kb {rss_anon_kb()}")
    rates = []
    for _ in range(reps):
        idxs = [rng.integers(0, len(R), B) for _ in range(batches)]
        t = time.perf_counter()
        for idx in idxs:
            xb = X[R[idx, None] + offsets].reshape(B, -1)
            yb = Y[idx]
        rates.append(batches * B / (time.perf_counter() - t))
    print(f"numpy_sps {statistics.median(rates):.0f}")
    assert xb.shape == (B, (2 * k + 1) * X.shape[1]) and yb.shape == (B,)


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]))
