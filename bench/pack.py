"""Benchmark: `ctxshard pack` against the I/O floor (cp -r of the raw
directory, with and without a final sync) and against the numpy script a
user writes today, in the same run, on the same files, interleaved, with
the page cache warm for everyone.  Prints the median of each and the ratios.

usage: /usr/bin/python3 bench/pack.py [--exe build/tools/ctxshard]
                                      [--utts 1000] [--repeats 5] [--dir DIR]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--exe", default=os.path.join(HERE, "..", "build", "tools", "ctxshard"))
    ap.add_argument("--utts", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix="ctxshard-bench-")
    raw = os.path.join(work, "raw")
    shutil.rmtree(raw, ignore_errors=True)
    subprocess.run([a.exe, "synth", raw, "--utts", str(a.utts), "--seed", "1"], check=True)
    nbytes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(raw) for f in fs)
    subprocess.run(["cat"] + [os.path.join(d, f) for d, _, fs in os.walk(raw) for f in fs],
                   check=True, stdout=subprocess.DEVNULL)  # warm the page cache
    dst = os.path.join(work, "dst")
    runs = {"cp -r": [], "cp -r + sync": [], "numpy script": [], "ctxshard pack": [],
            "ctxshard pack --threads 1": []}
    cmds = {
        "cp -r": ["cp", "-r", raw, dst],
        "cp -r + sync": ["sh", "-c", f"cp -r '{raw}' '{dst}' && sync"],
        "numpy script": [sys.executable, os.path.join(HERE, "pack_numpy_baseline.py"), raw, dst],
        "ctxshard pack": [a.exe, "pack", raw, dst, "--quiet"],
        "ctxshard pack --threads 1": [a.exe, "pack", raw, dst, "--quiet", "--threads", "1"],
    }
    for r in range(a.repeats):
        for name, cmd in cmds.items():
            shutil.rmtree(dst, ignore_errors=True)
            subprocess.run(["sync"])
            runs[name].append(timed(cmd))
    shutil.rmtree(dst, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"\n{a.utts} utterances, {nbytes / 2**20:.1f} MiB of raw .npy files, "
          f"{a.repeats} interleaved runs each, {os.cpu_count()} CPUs, warm page cache")
    print(f"{'':28s} {'median s':>9s} {'MB/s':>8s} {'pack / this':>12s}")
    pk = med["ctxshard pack"]
    for k, v in med.items():
        print(f"{k:28s} {v:9.3f} {nbytes / v / 1e6:8.0f} {pk / v:12.2f}")
    print(f"\npack time / cp -r time:        {pk / med['cp -r']:.2f}x  (target <= 1.5x)")
    print(f"pack time / (cp -r + sync):    {pk / med['cp -r + sync']:.2f}x  "
          f"(pack fsyncs its output; plain cp does not)")
    print(f"numpy script / pack:           {med['numpy script'] / pk:.2f}x faster  (target >= 4x)")
    if not a.dir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
