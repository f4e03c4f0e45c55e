"""Benchmark: what format 1.3's block sums cost, in one run on one dataset.
The same raw data packed with block sums (the default) and with
`--block-sums off`; then, interleaved, each command on both:

- pack (the writer forms the sums as it streams FEATURES out);
- verify (it checks every block besides the section checksums);
- warm --force of a cached dataset (it hashes every block it reads);
- bench-read --sampler block (the block sampler's reader hashes every
  block it reads ahead), samples/s;
- the size of the files (8 bytes per 64 KiB of features, per 4 KiB of
  labels and tables).

Medians of --repeats, and the ratio on/off of each: the machine is shared,
so read the ratios.

usage: /usr/bin/python3 bench/block_sums.py [--utts 800] [--repeats 5] [--build build]"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--utts", type=int, default=800)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    exe = os.path.abspath(os.path.join(a.build, "tools", "ctxshard"))
    tmp = tempfile.mkdtemp(prefix="ctxshard-bsum-")
    try:
        raw = os.path.join(tmp, "raw")
        subprocess.run([exe, "synth", raw, "--utts", str(a.utts), "--quiet"], check=True)
        modes = {"on": [], "off": ["--block-sums", "off"]}
        t = {(m, w): [] for m in modes for w in ("pack", "verify", "warm", "block")}
        rate = {m: [] for m in modes}
        for r in range(a.repeats):
            for m, extra in (modes.items() if r % 2 == 0 else reversed(modes.items())):
                out = os.path.join(tmp, m)
                shutil.rmtree(out, ignore_errors=True)
                t0 = time.perf_counter()
                subprocess.run([exe, "pack", raw, out, "--quiet", *extra], check=True)
                t[m, "pack"].append(time.perf_counter() - t0)
                for what, cmd in (("verify", ["verify", out, "--quiet"]),
                                  ("warm", ["warm", out, "--force", "--quiet"])):
                    t0 = time.perf_counter()
                    subprocess.run([exe, *cmd], check=True, capture_output=True)
                    t[m, what].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                p = subprocess.run([exe, "bench-read", out, "--sampler", "block", "--memory",
                                    "64M", "--batch", "1024", "--batches", "300"],
                                   check=True, capture_output=True, text=True)
                t[m, "block"].append(time.perf_counter() - t0)
                got = re.search(r"([0-9.]+)([KM]?) samples/s", p.stdout + p.stderr)
                if got:
                    rate[m].append(float(got.group(1)) * {"": 1, "K": 1e3, "M": 1e6}[got.group(2)])
        size = {m: sum(os.path.getsize(os.path.join(tmp, m, f))
                       for f in os.listdir(os.path.join(tmp, m))) for m in modes}
        print(f"{a.utts} utterances, {size['off'] / 2**20:.1f} MiB without block sums, "
              f"{size['on'] - size['off']} bytes more with them "
              f"({100 * (size['on'] - size['off']) / size['off']:.3f}%); medians of {a.repeats}")
        print(f"{'':24} {'on':>9} {'off':>9} {'on/off':>7}")
        for what, label in (("pack", "pack (s)"), ("verify", "verify (s)"),
                            ("warm", "warm, cached (s)"), ("block", "bench-read block (s)")):
            on, off = statistics.median(t["on", what]), statistics.median(t["off", what])
            print(f"{label:24} {on:9.3f} {off:9.3f} {on / off:7.2f}")
        if rate["on"] and rate["off"]:
            on, off = statistics.median(rate["on"]), statistics.median(rate["off"])
            print(f"{'block sampler samples/s':24} {on:9.0f} {off:9.0f} {on / off:7.2f}")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
