"""Benchmark: the Python Writer fed from arrays in memory, against
`ctxshard pack` of the same utterances from .npy files (one reader thread,
and all CPUs), ctxshard.pack (in-process, on the Writer), and the numpy
script users write today (bench/pack_numpy_baseline.py), interleaved in
the same run on the same data, the page cache warm for everyone.  Prints
the median seconds and frames/s of each and the ratios to `ctxshard pack
--threads 1`; then the Writer's peak memory against the dataset's size
(the Writer holds one shard's buffers, not the dataset).

usage: /usr/bin/python3 bench/writer.py [--exe build/tools/ctxshard]
                                        [--utts 2000] [--repeats 5] [--dir DIR]
"""
import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402

# Runs in a child: utterances generated one at a time and dropped, so the
# peak RSS is the Writer's (and numpy's and Python's own), not the data's.
# (VmHWM, not ru_maxrss: the latter keeps the forking parent's peak across exec.)
MEMORY_CHILD = """
import sys, numpy as np
sys.path.insert(0, sys.argv[3])
import ctxshard
utts, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
base = hwm()
with ctxshard.Writer(out, vocab="phonemes", shard_size="256M") as w:
    for u in range(utts):
        x = rng.standard_normal((1270, 28), dtype=np.float32)
        w.add(f"u{u:07d}", x, labels=rng.integers(0, 40, 1270))
print(base, hwm())
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", default=os.path.join(HERE, "..", "build", "tools", "ctxshard"))
    ap.add_argument("--utts", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix="ctxshard-bench-")
    raw = os.path.join(work, "raw")
    shutil.rmtree(raw, ignore_errors=True)
    subprocess.run([a.exe, "synth", raw, "--utts", str(a.utts), "--seed", "1", "--quiet"],
                   check=True)
    # the arrays a feature pipeline would hold: features, and labels as indices
    index = {s: i for i, s in enumerate(ctxshard.PHONEMES)}
    utts = []
    for f in sorted(glob.glob(os.path.join(raw, "mfcc", "*.npy"))):
        t = np.load(f.replace(os.sep + "mfcc" + os.sep, os.sep + "transcript" + os.sep))
        utts.append((os.path.basename(f)[:-4], np.load(f),
                     np.array([index[s] for s in t[1:-1]], dtype=np.uint8)))
    frames = sum(len(x) for _, x, _ in utts)
    nbytes = sum(x.nbytes for _, x, _ in utts)
    print(f"{len(utts)} utterances, {frames} frames x 28 float32 ({nbytes / 2**20:.0f} MiB), "
          f"{a.repeats} rounds, page cache warm", flush=True)

    def writer():
        with ctxshard.Writer(os.path.join(work, "w"), vocab="phonemes") as w:
            for i, x, y in utts:
                w.add(i, x, labels=y)

    def run(*cmd):
        return lambda: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)

    contenders = {
        "Writer (arrays in memory)": writer,
        "ctxshard pack --threads 1": run(a.exe, "pack", raw, os.path.join(work, "p1"),
                                         "--threads", "1", "--quiet"),
        "ctxshard pack (all CPUs)": run(a.exe, "pack", raw, os.path.join(work, "pn"), "--quiet"),
        "ctxshard.pack (in-process)": lambda: ctxshard.pack(raw, os.path.join(work, "pp")),
        "numpy script": run(sys.executable, os.path.join(HERE, "pack_numpy_baseline.py"), raw,
                            os.path.join(work, "np")),
    }
    times = {k: [] for k in contenders}
    for _ in range(a.repeats):
        for k, f in contenders.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    ref = statistics.median(times["ctxshard pack --threads 1"])
    print(f"{'':30s} {'median s':>9s} {'Mframes/s':>10s} {'vs pack -t1':>12s}")
    for k, ts in times.items():
        m = statistics.median(ts)
        print(f"{k:30s} {m:9.3f} {frames / m / 1e6:10.2f} {ref / m:11.2f}x")
    same = subprocess.run(["diff", "-r", os.path.join(work, "w"), os.path.join(work, "p1")],
                          stdout=subprocess.DEVNULL).returncode == 0
    print(f"Writer output byte-identical to ctxshard pack: {same}")

    # memory: peak RSS of a Writer over 4x and 16x more data
    print("Writer peak memory (utterances generated one at a time, 256 MiB shards):")
    for n in (2000, 8000):
        out = os.path.join(work, "mem")
        r = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(n), out,
                            os.path.join(HERE, "..", "python")],
                           check=True, capture_output=True, text=True)
        base, peak = map(int, r.stdout.split())
        size = n * 1270 * 28 * 4
        print(f"  {size / 2**20:7.0f} MiB of features: peak RSS {peak / 1024:6.0f} MiB "
              f"({(peak - base) / 1024:5.0f} MiB above the interpreter with numpy and ctxshard)")
        shutil.rmtree(out)
    if not a.dir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
