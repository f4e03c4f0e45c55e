"""Benchmark: ctxshard against PyTorch's DataLoader, in one run, on the same
packed data and raw files (k=30, B=1024, float32, >= 2M frames).

Rows (samples/s, ratio to row 1, time to first batch, peak RSS):
1. DataLoader over a naive Dataset: np.load per sample, pad per sample,
   torch.tensor copy (run briefly: it is slow);
2. DataLoader over the recitation-optimised Dataset (everything loaded at
   init, cumsum index, each utterance padded once, views), num_workers 0 and 2;
3. numpy fancy indexing of a padded in-memory array (no DataLoader);
4. ctxshard FrameDataset inside DataLoader (batch fetch via __getitems__);
5. ctxshard Loader (native prefetching loader).

Every row runs in its own process, shuffled sampling, the consumer touching
each batch.  Peak RSS is the process's VmHWM (DataLoader workers' own
memory not included), which counts the pages of ctxshard's mapped files
that were touched (shared page cache, not the process's own); RssAnon is the
anonymous memory at the end, the process's own.  Medians of --repeats runs.

usage: /usr/bin/python3 bench/torch_bench.py [--dir DIR] [--utts 1600] [--batches 200]
                                             [--repeats 3] [--markdown FILE]"""
import argparse
import bisect
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
K, B = 30, 1024
PHONEMES = ["[SIL]", "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER",
            "EY", "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P",
            "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH", "[SOS]", "[EOS]"]


def status_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return -1


# ---- the competitors (run in a child process) ---------------------------------

def naive_dataset(raw):
    import numpy as np
    import torch

    class Naive(torch.utils.data.Dataset):
        """What a first attempt looks like: everything per sample."""

        def __init__(self):
            self.ids = sorted(n[:-4] for n in os.listdir(os.path.join(raw, "mfcc")))
            lengths = [np.load(os.path.join(raw, "mfcc", u + ".npy"), mmap_mode="r").shape[0]
                       for u in self.ids]
            self.starts = np.concatenate([[0], np.cumsum(lengths)]).tolist()
            self.index = {p: i for i, p in enumerate(PHONEMES)}

        def __len__(self):
            return self.starts[-1]

        def __getitem__(self, i):
            u = bisect.bisect_right(self.starts, i) - 1
            t = i - self.starts[u]
            x = np.load(os.path.join(raw, "mfcc", self.ids[u] + ".npy"))
            y = np.load(os.path.join(raw, "transcript", self.ids[u] + ".npy"))[1:-1]
            x = np.pad(x, ((K, K), (0, 0)))
            return torch.tensor(x[t:t + 2 * K + 1].reshape(-1)), torch.tensor(self.index[y[t]])

    return Naive()


def recitation_dataset(raw):
    import numpy as np
    import torch

    class Recitation(torch.utils.data.Dataset):
        """The course recitation's advice: load everything at init, pad each
        utterance once, cumsum index, return views, float32."""

        def __init__(self):
            index = {p: i for i, p in enumerate(PHONEMES)}
            ids = sorted(n[:-4] for n in os.listdir(os.path.join(raw, "mfcc")))
            xs, ys, starts = [], [], []
            off = 0
            for u in ids:
                x = np.load(os.path.join(raw, "mfcc", u + ".npy")).astype(np.float32)
                t = np.load(os.path.join(raw, "transcript", u + ".npy"))[1:-1]
                xs.append(np.pad(x, ((K, K), (0, 0))))
                ys.append(np.array([index[p] for p in t], dtype=np.int64))
                starts.append(off + np.arange(len(x)))
                off += len(x) + 2 * K
            self.x = torch.from_numpy(np.concatenate(xs))
            self.y = torch.from_numpy(np.concatenate(ys))
            self.start = np.concatenate(starts)

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            s = self.start[i]
            return self.x[s:s + 2 * K + 1].reshape(-1), self.y[i]

    return Recitation()


def run_row(row, raw, packed, batches):
    # Every row's imports happen before the clock starts: time to first
    # batch is the dataset's own set-up.
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import ctxshard.torch as cxt
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    if row in ("naive", "recitation0", "recitation2", "framedataset"):
        if row == "naive":
            ds, workers, collate = naive_dataset(raw), 2, None
        elif row.startswith("recitation"):
            ds, workers, collate = recitation_dataset(raw), int(row[-1]), None
        else:
            ds, workers, collate = cxt.FrameDataset(packed, K), 0, cxt.collate
        kw = {"collate_fn": collate} if collate else {}
        it = iter(torch.utils.data.DataLoader(ds, batch_size=B, shuffle=True, generator=g,
                                              num_workers=workers, **kw))
    elif row == "numpy":
        rds = recitation_dataset(raw)
        X, Y, R = rds.x.numpy(), rds.y.numpy(), rds.start
        off = np.arange(2 * K + 1)
        rng = np.random.default_rng(0)

        def gen():
            while True:
                idx = rng.integers(0, len(R), B)
                yield torch.from_numpy(X[R[idx, None] + off].reshape(B, -1)), torch.from_numpy(Y[idx])
        it = gen()
    else:
        it = iter(cxt.Loader(packed, K, B, shuffle=True, seed=0))
    x, y = next(it)
    first = time.perf_counter() - t0
    sink = float(x[0, 0]) + float(x[-1, -1])
    n = 0
    t1 = time.perf_counter()
    for _ in range(batches):
        x, y = next(it)
        sink += float(x[-1, -1])  # the consumer touches every batch
        n += len(y)
    rate = n / (time.perf_counter() - t1)
    print(f"rate {rate}\nfirst {first}\nrss {status_mb('VmHWM')}\nanon {status_mb('RssAnon')}\n"
          f"sink {sink}")


# ---- the driver -------------------------------------------------------------

ROWS = [("naive", "1. DataLoader, naive Dataset (np.load per sample), 2 workers"),
        ("recitation0", "2. DataLoader, recitation Dataset, 0 workers"),
        ("recitation2", "2. DataLoader, recitation Dataset, 2 workers"),
        ("numpy", "3. numpy fancy indexing, padded array in RAM"),
        ("framedataset", "4. ctxshard FrameDataset in DataLoader"),
        ("loader", "5. ctxshard Loader")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--row")
    ap.add_argument("--raw")
    ap.add_argument("--packed")
    ap.add_argument("--dir")
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--utts", type=int, default=1600)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markdown")
    a = ap.parse_args()
    if a.row:
        run_row(a.row, a.raw, a.packed, a.batches)
        return
    work = a.dir or tempfile.mkdtemp(prefix="ctxshard-torch-")
    exe = os.path.join(a.build, "tools", "ctxshard")
    raw, packed = os.path.join(work, "raw"), os.path.join(work, "packed")
    if not os.path.exists(packed):
        shutil.rmtree(raw, ignore_errors=True)
        subprocess.run([exe, "synth", raw, "--utts", str(a.utts), "--seed", "2", "--quiet"], check=True)
        subprocess.run([exe, "pack", raw, packed, "--quiet"], check=True)
    env = dict(os.environ, CTXSHARD_LIB=os.path.join(a.build, "lib", "libctxshard.so"))
    results = {r: [] for r, _ in ROWS}
    for rep in range(a.repeats):
        for row, _ in ROWS:
            if row == "naive" and rep > 0:
                continue  # slow: once, briefly
            nb = max(3, a.batches // 40) if row == "naive" else a.batches
            out = subprocess.run([sys.executable, __file__, "--row", row, "--raw", raw,
                                  "--packed", packed, "--batches", str(nb)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            results[row].append(dict((l.split()[0], float(l.split()[1])) for l in out.splitlines()))
    med = {r: {k: statistics.median(x[k] for x in v) for k in ("rate", "first", "rss", "anon")}
           for r, v in results.items()}
    base = med["naive"]["rate"]
    lines = [f"k={K}, B={B}, float32, {a.utts} utterances (synth --seed 2), {os.cpu_count()} CPUs; "
             f"medians of {a.repeats} runs ({a.batches} batches; row 1: one short run)", "",
             "| reader | samples/s | vs row 1 | first batch | peak RSS | RssAnon |",
             "|---|---:|---:|---:|---:|---:|"]
    for row, name in ROWS:
        m = med[row]
        lines.append(f"| {name} | {m['rate']:,.0f} | {m['rate'] / base:,.1f}x | "
                     f"{m['first'] * 1e3:,.0f} ms | {m['rss']:,.0f} MiB | {m['anon']:,.0f} MiB |")
    best2 = max(med["recitation0"]["rate"], med["recitation2"]["rate"])
    L = med["loader"]
    init2 = min(med["recitation0"]["first"], med["recitation2"]["first"])
    lines += ["", f"Loader / best row 2: {L['rate'] / best2:.1f}x (target >= 10x); "
              f"Loader / numpy: {L['rate'] / med['numpy']['rate']:.2f}x (target >= 1.5x); "
              f"first batch: row 2 {init2:.2f} s vs Loader {L['first'] * 1e3:.0f} ms = "
              f"{init2 / L['first']:.0f}x (target >= 100x)"]
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text + "\n")
    if not a.dir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
