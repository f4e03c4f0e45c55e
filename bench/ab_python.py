"""Two trees' Python packages, side by side on the same library and data:
the torch loaders of each (bench/torch_bench.py's rows "loader" and
"framedataset", then UtteranceLoader, the frame mixture and the utterance
mixture: 150 batches each, the consumer touching every batch), rounds
alternating A and B (the order flipped every round), medians, B/A of the
medians and the median and range of the rounds' B/A pairs.  For a change
of python/ that must not slow the loaders: A = a checkout of the commit
before (its python/ and bench/), B = after; LIB the one libctxshard.so
both load (the library's own speed is bench/ab_loaders.py's).

usage: /usr/bin/python3 bench/ab_python.py A_TREE B_TREE LIB RAW PACKED PACKED2 [--rounds 5]
  RAW, PACKED: a raw directory and its packed dataset (ctxshard synth, pack);
  PACKED2: a second packed dataset of the same width, the mixtures' other source"""
import argparse
import os
import statistics
import subprocess
import sys

PASS = r'''
import sys, time
sys.path.insert(0, sys.argv[1] + "/python")
import ctxshard.torch as cxt
kind, p, p2 = sys.argv[2], sys.argv[3], sys.argv[4]
if kind == "utterances":
    L = cxt.UtteranceLoader(p, 16384, seed=1, threads=2)
elif kind == "mixture":
    L = cxt.Loader([p, p2], 30, 1024, seed=1, threads=2)
else:
    L = cxt.UtteranceLoader([p, p2], 16384, seed=1, threads=2)
n = f = 0
t = time.perf_counter()
for b in L:
    x = b[0]
    n += 1
    f += x.shape[0] * (x.shape[1] if x.dim() == 3 else 1)
    if n == 150:
        break
print(f / (time.perf_counter() - t))
'''
ROWS = [("loader", "torch_bench row 5, Loader (samples/s)"),
        ("framedataset", "torch_bench row 4, FrameDataset (samples/s)"),
        ("utterances", "UtteranceLoader (frames/s)"),
        ("mixture", "MixtureLoader, 2 sources (samples/s)"),
        ("utterance-mixture", "utterance mixture, 2 sources (frames/s)")]


def rate(tree, a, row):
    env = dict(os.environ, CTXSHARD_LIB=a.lib)
    if row in ("loader", "framedataset"):
        out = subprocess.run([sys.executable, os.path.join(tree, "bench", "torch_bench.py"),
                              "--row", row, "--raw", a.raw, "--packed", a.packed,
                              "--batches", "200"], env=env, check=True, capture_output=True,
                             text=True).stdout
        return dict((ln.split()[0], float(ln.split()[1])) for ln in out.splitlines())["rate"]
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", PASS, tree, row, a.packed,
                          a.packed2], env=env, check=True, capture_output=True, text=True).stdout
    return float(out.split()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("a", "b", "lib", "raw", "packed", "packed2"):
        p.add_argument(name)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    res = {r: {"a": [], "b": []} for r, _ in ROWS}
    for k in range(a.rounds):
        for row, _ in ROWS:
            for which in (("a", "b") if k % 2 == 0 else ("b", "a")):
                res[row][which].append(rate(getattr(a, which), a, row))
    print(f"A = {a.a}\nB = {a.b}\nlibrary {a.lib}; {a.rounds} rounds alternating, medians")
    print(f"{'':42} {'A':>14} {'B':>14} {'B/A':>6} {'pairs B/A (min-max)':>22}")
    for row, name in ROWS:
        ra, rb = res[row]["a"], res[row]["b"]
        pairs = [y / x for x, y in zip(ra, rb)]
        print(f"{name:42} {statistics.median(ra):14,.0f} {statistics.median(rb):14,.0f} "
              f"{statistics.median(rb) / statistics.median(ra):6.2f} "
              f"{statistics.median(pairs):8.2f} ({min(pairs):.2f}-{max(pairs):.2f})")


if __name__ == "__main__":
    main()
