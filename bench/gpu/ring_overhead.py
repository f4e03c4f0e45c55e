"""Benchmark: the device batch ring's steady-state cost per batch on the
emulated device -- the take, train, drop loop of ctxshard.torch.Loader
(gpu_emulate=True) -- for two builds of the library and the package side
by side, in paired runs.

Each run is its own process over one epoch (after one warm-up epoch) of
Loader(context=K, batch_size=B, gpu_mode=MODE, gpu_emulate=True); the loop
body only reads x's and y's shapes, so what is timed is the loader: the
emulated expansion, the ring, and the Python wrapping of each batch.  A
round runs "before" and "after" in alternating order; the figure is the
median over rounds of each side's microseconds per batch and of the
per-round ratio after/before.

usage: /usr/bin/python3 bench/gpu/ring_overhead.py --before-lib OLD/libctxshard.so
           --before-python OLD/python [--build build] [--rounds 7] [--utts 400]
           [--modes resident,stream,pool] [--batches 16,256] [--k 0]"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")


def child(a):
    sys.path.insert(0, a.python)
    import ctxshard
    import ctxshard.torch as cxt
    info = ctxshard.open(a.packed).info
    budget = None
    if a.mode == "pool":  # four segments of a quarter of the features, and the ring
        budget = info["feature_bytes"] + 3 * a.batch * ((2 * a.k + 1) * info["dim"] * 4 + 32)
    L = cxt.Loader(a.packed, a.k, a.batch, seed=1, gpu_emulate=True, gpu_mode=a.mode,
                   gpu_budget=budget)
    for x, y in L:  # warm-up epoch: the upload, the first allocations
        x.shape, y.shape
    n, t0 = 0, time.perf_counter()
    for x, y in L:
        x.shape, y.shape
        n += 1
    dt = time.perf_counter() - t0
    print(json.dumps({"us_per_batch": dt / n * 1e6, "batches": n}))


def run(a, lib, python, mode, batch):
    env = dict(os.environ, CTXSHARD_LIB=lib)
    out = subprocess.run([sys.executable, __file__, "--child", "--packed", a.packed,
                          "--python", python, "--mode", mode, "--batch", str(batch),
                          "--k", str(a.k)], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["us_per_batch"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--packed")
    ap.add_argument("--python")
    ap.add_argument("--mode")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--k", type=int, default=0)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--before-lib")
    ap.add_argument("--before-python")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--utts", type=int, default=400)
    ap.add_argument("--modes", default="resident,stream,pool")
    ap.add_argument("--batches", default="16,256")
    a = ap.parse_args()
    if a.child:
        return child(a)
    after_lib = os.path.join(a.build, "lib", "libctxshard.so")
    after_py = os.path.join(ROOT, "python")
    exe = os.path.join(a.build, "tools", "ctxshard")
    with tempfile.TemporaryDirectory(prefix="cxs-ring-") as tmp:
        raw, a.packed = os.path.join(tmp, "raw"), os.path.join(tmp, "packed")
        subprocess.run([exe, "synth", raw, "--utts", str(a.utts), "--seed", "1", "--quiet"],
                       check=True)
        subprocess.run([exe, "pack", raw, a.packed, "--quiet"], check=True)
        print(f"| mode | B | before us/batch | after us/batch | after/before (median of {a.rounds} paired rounds) |")
        print("|---|---|---|---|---|")
        for mode in a.modes.split(","):
            for batch in map(int, a.batches.split(",")):
                before, after, ratio = [], [], []
                for r in range(a.rounds):
                    sides = [(a.before_lib, a.before_python, before), (after_lib, after_py, after)]
                    if r % 2:
                        sides.reverse()
                    for lib, py, acc in sides:
                        acc.append(run(a, lib, py, mode, batch))
                    ratio.append(after[-1] / before[-1])
                print(f"| {mode} | {batch} | {statistics.median(before):.1f} | "
                      f"{statistics.median(after):.1f} | {statistics.median(ratio):.3f} |",
                      flush=True)


if __name__ == "__main__":
    main()
