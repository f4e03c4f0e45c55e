"""Benchmark: whole-utterance padded batches (sequence models), ctxshard
against the usual PyTorch starter code, in one run on the same data.

1. Throughput: ctxshard.torch.UtteranceLoader (native prefetching loader)
   against a torch DataLoader over a Dataset that np.loads each utterance's
   .npy features and transcript and a collate_fn that pads them with
   pad_sequence (HW3P2-style starter code), with the SAME batches: both
   follow ctxshard's UtteranceBatchSampler (length buckets under the frame
   budget), and the DataLoader has as many workers as the loader has
   threads; and the same DataLoader over a Dataset that loaded everything
   in __init__ (the recitation's advice).  They take turns (each first in
   turn), each consuming --batches
   batches (touching every x); utterances/s and real frames/s, medians of
   --repeats, ratio loader / DataLoader.
2. Padding overhead: padded frames (batch size x longest) / real frames
   over an epoch, bucketed (the default bucket count) against random
   batching (one bucket), same budget and seed.
3. The sampler at LibriSpeech-960 scale: a packed dataset of --big-utts
   utterances (281,241 by default, LibriSpeech 960 h) with realistic
   lengths (log-normal, mean about 1,230 frames, 100..3,500) and one
   feature per frame (the sampler reads the index only): time to create
   the sampler, to build an epoch's order, to resume half-way (a new
   sampler and one batch at the middle), medians of --repeats.

usage: /usr/bin/python3 bench/utt_bench.py [--dir DIR] [--utts 1200]
           [--budget 20000] [--threads 2] [--batches 60] [--repeats 5]
           [--big-utts 281241] [--skip-big]"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("CTXSHARD_LIB", os.path.join(ROOT, "build", "lib", "libctxshard.so"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn.utils.rnn import pad_sequence  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.torch as cxt  # noqa: E402
from ctxshard import utterances as cxu  # noqa: E402

PHONEMES = ["[SIL]", "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY",
            "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P", "R",
            "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH", "[SOS]", "[EOS]"]


class NpyUtterances(torch.utils.data.Dataset):
    """The starter code's Dataset: one .npy of features and one of phoneme
    strings per utterance, loaded in __getitem__."""

    def __init__(self, raw, ids):
        self.raw, self.ids = raw, ids
        self.index = {p: i for i, p in enumerate(PHONEMES)}

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        uid = self.ids[i]
        x = np.load(os.path.join(self.raw, "mfcc", uid + ".npy"))
        t = np.load(os.path.join(self.raw, "transcript", uid + ".npy"))[1:-1]
        y = np.array([self.index[p] for p in t], dtype=np.int64)
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)


class PreloadedUtterances(torch.utils.data.Dataset):
    """The recitation's advice: every utterance loaded (and its labels
    mapped) once in __init__, __getitem__ returns tensors."""

    def __init__(self, raw, ids):
        src = NpyUtterances(raw, ids)
        self.items = [src[i] for i in range(len(ids))]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def pad_collate(batch):
    xs, ys = zip(*batch)
    lengths = torch.tensor([len(x) for x in xs])
    return (pad_sequence(xs, batch_first=True), lengths,
            pad_sequence(ys, batch_first=True, padding_value=-100))


def consume(it, n):
    """(seconds, utterances, real frames) of n batches of it."""
    t0 = time.perf_counter()
    utts = frames = 0
    for i, (x, lengths, y) in enumerate(it):
        x.sum()  # touch the batch
        utts += len(lengths)
        frames += int(lengths.sum())
        if i + 1 == n:
            break
    return time.perf_counter() - t0, utts, frames


def throughput(a):
    packed = os.path.join(a.dir, "packed")
    ids = ctxshard.open(packed).ids
    t0 = time.perf_counter()
    pre = PreloadedUtterances(os.path.join(a.dir, "raw"), ids)
    init = time.perf_counter() - t0
    rows = {"UtteranceLoader": [], "DataLoader + np.load + pad_sequence": [],
            "DataLoader + preloaded in __init__ + pad_sequence": []}
    for r in range(a.repeats):
        names = list(rows)
        for name in names[r % len(names):] + names[:r % len(names)]:  # each first in turn
            if name == "UtteranceLoader":
                it = iter(cxt.UtteranceLoader(packed, frame_budget=a.budget, seed=r,
                                              threads=a.threads))
            else:
                bs = cxt.UtteranceBatchSampler(packed, frame_budget=a.budget, seed=r)
                data = pre if "preloaded" in name else NpyUtterances(os.path.join(a.dir, "raw"),
                                                                     ids)
                dl = torch.utils.data.DataLoader(data,
                                                 batch_sampler=bs, collate_fn=pad_collate,
                                                 num_workers=a.threads)
                it = iter(dl)
            dt, u, f = consume(it, a.batches)
            del it
            rows[name].append((u / dt, f / dt))
    base = statistics.median(v[0] for v in rows["DataLoader + np.load + pad_sequence"])
    print(f"\n## Throughput: {a.batches} batches, frame budget {a.budget}, {a.threads} "
          f"threads / workers, medians of {a.repeats} alternating runs\n")
    print("| reader | utterances/s | frames/s | ratio |")
    print("|---|---:|---:|---:|")
    for name, v in rows.items():
        us = statistics.median(x[0] for x in v)
        fs = statistics.median(x[1] for x in v)
        print(f"| {name} | {us:,.0f} | {fs:,.0f} | {us / base:.2f}x |")
    print(f"\n(preloading took {init:.1f} s before the first batch; the others start at "
          "once)")


def padding(a):
    ds = ctxshard.open(os.path.join(a.dir, "packed"))
    lens = np.array([ds.utterance_frames(u)[1] for u in range(ds.num_utterances)])
    print(f"\n## Padding overhead over one epoch (frame budget {a.budget}, seeds 0..4)\n")
    print("| batching | batches | padded / real frames |")
    print("|---|---:|---:|")
    for name, buckets in (("bucketed (default buckets)", None), ("random (1 bucket)", 1),
                          ("bucketed, 8 buckets", 8)):
        ratios, nb = [], []
        for seed in range(5):
            s = cxu.UtteranceSampler(ds, a.budget, seed=seed, buckets=buckets)
            padded = real = n = 0
            for b in s:
                L = lens[b]
                padded += len(b) * int(L.max())
                real += int(L.sum())
                n += 1
            ratios.append(padded / real)
            nb.append(n)
        print(f"| {name} | {statistics.median(nb):.0f} | {statistics.median(ratios):.3f} |")


def big(a):
    out = os.path.join(a.dir, f"big{a.big_utts}")
    if not os.path.exists(out):
        rng = np.random.default_rng(0)
        lens = np.clip(rng.lognormal(np.log(1150), 0.38, a.big_utts), 100, 3500).astype(int)
        t0 = time.perf_counter()
        with ctxshard.Writer(out, dtype="float16", guard=0, shard_size="256M") as w:
            for i, T in enumerate(lens):
                w.add(f"u{i:07d}", np.zeros((T, 1), np.float32))
        print(f"(wrote {out}: {a.big_utts} utterances, {lens.sum():,} frames, "
              f"{time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    ds = ctxshard.open(out)
    lens_mean = ds.info["num_frames"] / ds.num_utterances
    create, order, resume = [], [], []
    for r in range(a.repeats):
        t0 = time.perf_counter()
        s = cxu._Order(ds, cxu._n.UttSamplerOpts(1, r, a.budget, 0, 0, 0, 0, 1, 0, 0, 0, 0))
        t1 = time.perf_counter()
        _, n = s.lengths(0)
        t2 = time.perf_counter()
        create.append((t1 - t0) * 1e3)
        order.append((t2 - t1) * 1e3)
        t0 = time.perf_counter()
        s2 = cxu._Order(ds, cxu._n.UttSamplerOpts(1, r, a.budget, 0, 0, 0, 0, 1, 0, 0, 0, 0))
        s2.batch(0, n // 2, np.empty(s2.max_batch, np.uint64))
        resume.append((time.perf_counter() - t0) * 1e3)
        del s, s2
    print(f"\n## The sampler at {ds.num_utterances:,} utterances ({lens_mean:,.0f} frames "
          f"mean), frame budget {a.budget}: medians of {a.repeats}\n")
    print("| step | ms |")
    print("|---|---:|")
    print(f"| create (length buckets from the index) | {statistics.median(create):.1f} |")
    print(f"| build an epoch's order ({n:,} batches) | {statistics.median(order):.1f} |")
    print(f"| resume half-way: new sampler + one batch | {statistics.median(resume):.1f} |")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir")
    p.add_argument("--utts", type=int, default=1200)
    p.add_argument("--budget", type=int, default=20000)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--big-utts", type=int, default=281241)
    p.add_argument("--skip-big", action="store_true")
    a = p.parse_args()
    a.dir = a.dir or tempfile.mkdtemp(prefix="ctxshard-uttbench-")
    exe = os.path.join(ROOT, "build", "tools", "ctxshard")
    if not os.path.exists(os.path.join(a.dir, "packed")):
        subprocess.run([exe, "synth", os.path.join(a.dir, "raw"), "--utts", str(a.utts),
                        "--quiet"], check=True)
        subprocess.run([exe, "pack", os.path.join(a.dir, "raw"), os.path.join(a.dir, "packed"),
                        "--quiet"], check=True)
    print(f"data: {a.dir} ({a.utts} utterances, LibriSpeech-like lengths, 28 MFCCs)")
    throughput(a)
    padding(a)
    if not a.skip_big:
        big(a)


if __name__ == "__main__":
    main()
