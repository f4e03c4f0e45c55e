"""Benchmark: a mixture of 3 datasets against one dataset of the same total
size, frame windows and length-bucketed utterance batches, in one run on
the same machine.

Synthesises three raw datasets (--utts split 1:2:4, distinct ids) and one
of all their utterance count together (the same lengths' distribution and
total size), packs the four, reads each whole once (warm: the comparison
is of the loaders, not the disk), then takes turns, --rounds times, the
order flipped every round:

  one:      ctxshard bench-read ALL                   (the frame loader)
  natural:  ctxshard bench-read A B C                 (a mixture, natural shares)
  weighted: ctxshard bench-read A B C --weights 1,1,1 (each a third: A repeated)

each serving --batches batches of --batch windows of --context; then the
same three with `bench-utt` (the utterance loader against the utterance
mixture loader, --utt-batches padded batches of --frame-budget, default
buckets; one dataset's run is its "bucketed" line).  It prints samples/s
(frames/s of real frames for utterances) per run, the medians, and
mixture / one of the medians (target: at least 0.9).

usage: /usr/bin/python3 bench/mix.py [--dir DIR] [--utts 2100] [--rounds 5]
           [--batches 1500] [--batch 1024] [--context 30] [--threads N]
           [--frame-budget 16000] [--utt-batches 3000]"""
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


def utt_rate(out):
    """Real frames/s of a bench-utt run: a mixture's summary line, or one
    dataset's bucketed line."""
    m = re.search(r"utts/s, ([0-9]+) frames/s", out)
    if m:
        return float(m.group(1))
    m = re.search(r"^  bucketed +[0-9]+ +[0-9]+ +([0-9]+)", out, re.M)
    return float(m.group(1))


def compare(kinds, runner, rounds, what):
    rates = {k: [] for k in kinds}
    for r in range(rounds):
        order = list(kinds) if r % 2 == 0 else list(reversed(kinds))
        for k in order:
            rates[k].append(runner(k))
        print(f"{what} round {r + 1}: " + ", ".join(f"{k} {rates[k][-1]:,.0f}" for k in kinds),
              flush=True)
    return rates


def report(rates, rounds, unit):
    med = {k: statistics.median(v) for k, v in rates.items()}
    print(f"\nmedians of {rounds} rounds, {unit}:")
    for k in rates:
        print(f"  {k:9s} {med[k]:12,.0f}   {med[k] / med['one']:.3f}x one dataset")
    for k in ("natural", "weighted"):
        pairs = sorted(x / y for x, y in zip(rates[k], rates["one"]))
        print(f"  {k}/one per round: median {statistics.median(pairs):.3f}, "
              f"range {pairs[0]:.3f}..{pairs[-1]:.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir")
    ap.add_argument("--utts", type=int, default=2100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=1500)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--context", type=int, default=30)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--frame-budget", type=int, default=16000)
    ap.add_argument("--utt-batches", type=int, default=3000)
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
        rates = compare(kinds, lambda k: rate(run("bench-read", *kinds[k], *common)), a.rounds,
                        "frames")
        info = run("bench-read", *names, *common[:2], "--batches", 1)
        print(info.strip().split("\n", 1)[1].rsplit("\n", 2)[0])
        report(rates, a.rounds, f"samples/s (batch {a.batch}, k={a.context})")
        ucommon = ["--frame-budget", a.frame_budget, "--batches", a.utt_batches]
        if a.threads:
            ucommon += ["--threads", a.threads]
        urates = compare(kinds, lambda k: utt_rate(run("bench-utt", *kinds[k], *ucommon)),
                         a.rounds, "utterances")
        info = run("bench-utt", *names, *ucommon[:2], "--batches", 1)
        print(info.strip().split("\n", 1)[1].rsplit("\n", 2)[0])
        report(urates, a.rounds, f"real frames/s of padded utterance batches (frame budget "
                                 f"{a.frame_budget})")
    finally:
        if own:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
