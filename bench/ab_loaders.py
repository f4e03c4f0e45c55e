"""Two builds of the command, side by side on the same dataset: the frame
loader (`bench-read`, shuffle, and block order when --memory is given) and
the utterance loader (`bench-utt`, bucketed), rounds alternating A and B
(the order flipped every round), medians and the B/A ratio of the medians
and of each round's pair.  For a change that must not move the loaders'
speed (the house's refactors): run A = the build before, B = after.

--stream SIZE adds the utterance loader over the dataset streamed from
nginx on 127.0.0.1 (block mode within SIZE, `bench-utt URL --memory`),
through a cache that already holds every block: what the stream's holds
and locks cost each batch, not the transfers (the first, unmeasured run
of A fills the cache).

usage: /usr/bin/python3 bench/ab_loaders.py A_CTXSHARD B_CTXSHARD DATASET
           [--rounds 7] [--batches 400] [--context 30] [--memory SIZE]
           [--stream SIZE]"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile

from remote import nginx


def frame_rate(exe, ds, a, sampler):
    cmd = [exe, "bench-read", ds, "--context", str(a.context), "--batch", "1024",
           "--batches", str(a.batches)]
    if sampler == "block":
        cmd += ["--sampler", "block", "--memory", a.memory]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(re.search(r"([0-9.]+) samples/s", out).group(1))


def utt_rate(exe, ds, a, memory):
    cmd = [exe, "bench-utt", ds, "--frame-budget", "16384", "--batches", str(a.batches), "--json"]
    if memory:
        cmd += ["--memory", memory]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)["bucketed"]["frames_per_s"]


def streamed_utt_rate(exe, _, a, memory):
    return utt_rate(exe, a.url, a, memory)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("dataset")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--batches", type=int, default=400)
    p.add_argument("--context", type=int, default=30)
    p.add_argument("--memory", help="also the block sampler with this budget (e.g. 64M)")
    p.add_argument("--stream", help="also the utterance loader streamed, block mode within "
                   "this budget (e.g. 64M)")
    a = p.parse_args()
    rows = [("frame loader, shuffle (samples/s)", frame_rate, "shuffle"),
            ("utterance loader, bucketed (frames/s)", utt_rate, None)]
    if a.memory:
        rows.insert(1, (f"frame loader, block order {a.memory} (samples/s)", frame_rate, "block"))
    srv, tmp = None, None
    if a.stream:
        rows.append((f"utterance loader, streamed {a.stream} (frames/s)", streamed_utt_rate,
                     a.stream))
        tmp = tempfile.mkdtemp(prefix="ab-stream-")
        os.chmod(tmp, 0o755)
        os.makedirs(os.path.join(tmp, "www"))
        os.symlink(os.path.abspath(a.dataset), os.path.join(tmp, "www", "ds"))
        srv, port = nginx(os.path.join(tmp, "www"), os.path.join(tmp, "nginx"))
        a.url = f"http://127.0.0.1:{port}/ds"
        os.environ["CTXSHARD_CACHE"] = os.path.join(tmp, "cache")
        streamed_utt_rate(a.a, None, a, a.stream)  # fills the cache
    res = {r[0]: {"a": [], "b": []} for r in rows}
    try:
        for k in range(a.rounds):
            order = ("a", "b") if k % 2 == 0 else ("b", "a")
            for name, fn, arg in rows:
                for which in order:
                    res[name][which].append(fn(getattr(a, which), a.dataset, a, arg))
    finally:
        if srv:
            srv.terminate()
            srv.wait()
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"A = {a.a}\nB = {a.b}\n{a.dataset}, {a.rounds} rounds alternating, medians")
    print(f"{'':42} {'A':>14} {'B':>14} {'B/A':>6} {'pairs B/A (min-max)':>22}")
    for name, _, _ in rows:
        ra, rb = res[name]["a"], res[name]["b"]
        ma, mb = statistics.median(ra), statistics.median(rb)
        pairs = [y / x for x, y in zip(ra, rb)]
        print(f"{name:42} {ma:14,.0f} {mb:14,.0f} {mb / ma:6.2f} "
              f"{statistics.median(pairs):8.2f} ({min(pairs):.2f}-{max(pairs):.2f})")


if __name__ == "__main__":
    main()
