"""Benchmark: time from creating a loader to its first batch, on a dataset
held in the page cache: Python's ctxshard.torch.Loader with and without
its background warm-up (prefetch), and `ctxshard bench-read` (open + first
batch), interleaved in one run.  Prints the median, min and max of each.

usage: /usr/bin/python3 bench/first_batch.py DATASET [--runs 11]
                                              [--exe build/tools/ctxshard]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import ctxshard.torch as cxt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--exe", default=os.path.join(HERE, "..", "build", "tools", "ctxshard"))
    a = ap.parse_args()
    res = {"Loader, prefetch=True": [], "Loader, prefetch=False": [], "  then close()": [],
           "bench-read": []}

    def loader(s, p):
        t0 = time.perf_counter()
        loader = cxt.Loader(a.dataset, 30, 1024, shuffle=True, seed=s, threads=2, prefetch=p)
        it = iter(loader)
        next(it)
        res[f"Loader, prefetch={p}"].append((time.perf_counter() - t0) * 1e3)
        # the teardown, timed apart: ending the iteration stops the workers
        # (mid-batch) and the warm-up
        t0 = time.perf_counter()
        it.close()
        loader.close()
        res["  then close()"].append((time.perf_counter() - t0) * 1e3)

    def bench_read(s):
        out = subprocess.run([a.exe, "bench-read", a.dataset, "--threads", "2", "--batches", "2",
                              "--seed", str(s)], capture_output=True, text=True,
                             check=True).stdout
        first = float(out.split("first batch ")[1].split(" ms")[0])
        opened = float(out.split("open ")[1].split(" ms")[0])
        res["bench-read"].append(first + opened)

    runs = [lambda s: loader(s, True), lambda s: loader(s, False), bench_read]
    for s in range(a.runs):
        # all of it cached (untimed; reads only what is not: a residency
        # check when everything is).  Re-reading the files every run made
        # whichever ran next slow.
        subprocess.run([a.exe, "warm", a.dataset, "--quiet"], check=True)
        for k in range(3):  # each in every position in turn
            runs[(s + k) % 3](s)
    print(f"k=30, batch 1024, 2 threads, shuffle; {a.runs} runs; creation to first batch:")
    for k, v in res.items():
        print(f"  {k:24s} median {statistics.median(v):7.1f} ms  (min {min(v):.1f}, "
              f"max {max(v):.1f})")


if __name__ == "__main__":
    main()
