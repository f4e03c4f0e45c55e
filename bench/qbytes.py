"""Bytes of coded datasets (format 1.4): the same synthetic fbank-like
utterances written as float32 (the packer's default: guard 64), float16,
q8 and q16, side by side in one run, at D = 28, 40 and 80; the sizes of
the datasets (every file) and their ratios to float32, and the writers'
times (medians of --repeats, interleaved).

    ninja -C build && /usr/bin/python3 bench/qbytes.py [--utts 300] [--repeats 3] [--dir DIR]

The features are log-mel-like: a smooth spectral envelope per utterance,
a slowly varying energy per frame and noise, so every column has its own
range (what q8's per-column percentiles are for).  Targets (issue 47): q8
<= 0.27x float32 at D = 40 and 80, q16 <= 0.52x."""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "python"))
os.environ.setdefault("CTXSHARD_LIB", os.path.join(SRC, "build", "lib", "libctxshard.so"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402


def utterances(n, dim, seed=47):
    rng = np.random.default_rng(seed)
    T = np.clip(rng.lognormal(np.log(1150), 0.45, n).astype(np.int64), 100, 3500)
    out = []
    for i in range(n):
        env = np.cumsum(rng.standard_normal(dim)) * 0.5 + np.linspace(2, -4, dim)
        energy = np.convolve(rng.standard_normal(T[i] + 20), np.ones(21) / 21, "valid") * 3
        x = env[None, :] + energy[:, None] + rng.standard_normal((T[i], dim)) * 0.8
        out.append((f"utt-{i:06d}", x.astype(np.float32)))
    return out


def du(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def write(out, utts, dtype):
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    with ctxshard.Writer(out, dtype=dtype) as w:
        for k, x in utts:
            w.add(k, x)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--utts", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="ctxshard-qbytes-", dir=a.dir)
    dtypes = ["float32", "float16", "q16", "q8"]
    try:
        print(f"{a.utts} utterances; sizes of whole datasets; writer seconds: medians of "
              f"{a.repeats}, interleaved; load: {os.getloadavg()[0]:.2f}")
        print(f"  {'D':>3s} {'dtype':8s} {'bytes':>12s} {'x float32':>10s} {'write s':>8s}")
        for dim in (28, 40, 80):
            utts = utterances(a.utts, dim)
            t = {k: [] for k in dtypes}
            for _ in range(a.repeats):
                for k in dtypes:
                    t[k].append(write(os.path.join(d, k), utts, k))
            size = {k: du(os.path.join(d, k)) for k in dtypes}
            for k in dtypes:
                print(f"  {dim:3d} {k:8s} {size[k]:12d} {size[k] / size['float32']:10.3f} "
                      f"{statistics.median(t[k]):8.2f}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
