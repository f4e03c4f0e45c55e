"""Benchmark: a mixture of 3 datasets against one dataset of the same total
size, frame windows, in one run on the same machine.

Synthesises three raw datasets (--utts split 1:2:4, distinct ids) and one
of all their utterance count together (the same lengths' distribution and
total size), packs the four, reads each whole once (warm: the comparison
is of the loaders, not the disk), then takes turns, --rounds times, the
order flipped every round:

  one:      ctxshard bench-read ALL                   (the frame loader)
  natural:  ctxshard bench-read A B C                 (a mixture, natural shares)
  weighted: ctxshard bench-read A B C --weights 1,1,1 (each a third: A repeated)

each serving --batches batches of --batch windows of --context.  It prints
samples/s per run, the medians, and mixture / one of the medians (target:
at least 0.9).

usage: /usr/bin/python3 bench/mix.py [--dir DIR] [--utts 2100] [--rounds 5]
           [--batches 1500] [--batch 1024] [--context 30] [--threads N]"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXE = os.path.join(ROOT, "build", "tools", "ctxshard")


def run(*args):
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"ctxshard {' '.join(map(str, args))}: {p.stderr}")
    return p.stdout


def rate(out):
    m = re.search(r"in ([0-9.]+) s: ([0-9]+) samples/s", out)
    return float(m.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir")
    ap.add_argument("--utts", type=int, default=2100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--context", type=int, default=30)
    ap.add_argument("--threads", type=int)
    a = ap.parse_args()
    own = a.dir is None
    d = a.dir or tempfile.mkdtemp(prefix="ctxshard-mixbench-")
    try:
        n = [a.utts // 7, 2 * a.utts // 7]
        n.append(a.utts - sum(n))
        names, off = [], 0
        for i, k in enumerate(n):
            name = "ABC"[i]
            if not os.path.exists(os.path.join(d, name)):
                run("synth", os.path.join(d, name + ".raw"), "--utts", k, "--seed", 10 + i,
                    "--offset", off, "--quiet")
                run("pack", os.path.join(d, name + ".raw"), os.path.join(d, name), "--quiet")
            names.append(os.path.join(d, name))
            off += k
        one = os.path.join(d, "ALL")
        if not os.path.exists(one):
            run("synth", one + ".raw", "--utts", a.utts, "--seed", 20, "--quiet")
            run("pack", one + ".raw", one, "--quiet")
        for p in names + [one]:  # warm: the loaders, not the disk
            run("warm", p, "--quiet")
        common = ["--batches", a.batches, "--batch", a.batch, "--context", a.context]
        if a.threads:
            common += ["--threads", a.threads]
        kinds = {"one": [one], "natural": names, "weighted": names + ["--weights", "1,1,1"]}
        rates = {k: [] for k in kinds}
        for r in range(a.rounds):
            order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
            for k in order:
                rates[k].append(rate(run("bench-read", *kinds[k], *common)))
            print(f"round {r + 1}: " + ", ".join(f"{k} {rates[k][-1]:,.0f}" for k in kinds),
                  flush=True)
        info = run("bench-read", *names, *common[:2], "--batches", 1)
        print(info.strip().split("\n", 1)[1].rsplit("\n", 2)[0])
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"\nmedians of {a.rounds} rounds, samples/s (batch {a.batch}, k={a.context}):")
        for k in kinds:
            print(f"  {k:9s} {med[k]:12,.0f}   {med[k] / med['one']:.3f}x one dataset")
        for k in ("natural", "weighted"):
            pairs = sorted(x / y for x, y in zip(rates[k], rates["one"]))
            print(f"  {k}/one per round: median {statistics.median(pairs):.3f}, "
                  f"range {pairs[0]:.3f}..{pairs[-1]:.3f}")
    finally:
        if own:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
