"""Datasets at URLs against a local copy, side by side in one run: nginx on
127.0.0.1 serves a dataset of >= 1 GB, and each round (in alternating
order) times, with the page cache dropped first (needs root):

  local   a block-order epoch of `bench-read` over the local copy, cold;
  first   the same command over the URL with an empty cache: the time to
          the first batch (download, verification, open);
  epoch   the same epoch over the URL with an empty cache (download,
          verification, then the epoch from the cache);
  again   the epoch once more over the URL, the cache complete (cold page
          cache: the copy is read from the local disk like the local one).

It reports the medians, the ratios the issue asks for (epoch rate through
the cache against the cold local epoch; bytes fetched per epoch over the
feature bytes; the second epoch against local) and the time to first batch.

usage: sudo /usr/bin/python3 bench/remote.py [--build build] [--dir /tmp/remotebench]
           [--utts 7000] [--rounds 3] [--memory 512M]"""
import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def timed(cmd, env=None):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.monotonic() - t0
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr}")
    return dt, p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--dir", default="/tmp/remotebench")
    ap.add_argument("--utts", type=int, default=7000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--memory", default="512M")
    a = ap.parse_args()
    exe = os.path.join(a.build, "tools", "ctxshard")
    www, ds = os.path.join(a.dir, "www"), os.path.join(a.dir, "www", "ds")
    os.makedirs(www, exist_ok=True)
    os.chmod(a.dir, 0o755)
    os.chmod(www, 0o755)
    if not os.path.exists(os.path.join(ds, "manifest.cxs")):
        raw = os.path.join(a.dir, "raw")
        subprocess.run([exe, "synth", raw, "--utts", str(a.utts), "--quiet"], check=True)
        subprocess.run([exe, "pack", raw, ds, "--quiet"], check=True)
        shutil.rmtree(raw)
    size = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
    info = subprocess.run([exe, "info", ds, "--json"], capture_output=True, text=True,
                          check=True).stdout
    frames = int(re.search(r'"frames":\s*(\d+)', info).group(1))
    batches = -(-frames // 1024)  # one epoch of 1024-sample batches
    port = free_port()
    ng = os.path.join(a.dir, "nginx")
    os.makedirs(ng, exist_ok=True)
    with open(os.path.join(ng, "nginx.conf"), "w") as f:
        temp = " ".join(f"{k}_temp_path {ng}/{k};" for k in
                        ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        f.write(f"daemon off; worker_processes 2; pid {ng}/nginx.pid; error_log {ng}/error.log;\n"
                "events { worker_connections 256; }\n"
                f"http {{ access_log off; sendfile on; {temp}\n"
                f"  server {{ listen 127.0.0.1:{port}; root {www}; }} }}\n")
    srv = subprocess.Popen(["nginx", "-c", os.path.join(ng, "nginx.conf"), "-p", ng])
    time.sleep(0.5)
    url = f"http://127.0.0.1:{port}/ds"
    cache = os.path.join(a.dir, "cache")
    common = ["--sampler", "block", "--memory", a.memory, "--context", "30", "--batch", "1024"]
    res = {k: [] for k in ("local", "first", "epoch", "again")}
    fetched = []
    try:
        for r in range(a.rounds):
            order = ["local", "first", "epoch", "again"]
            if r % 2:
                order = ["first", "epoch", "again", "local"]
            for what in order:
                if what in ("first", "epoch"):
                    shutil.rmtree(cache, ignore_errors=True)
                drop_caches()
                n = 1 if what == "first" else batches
                target = ds if what == "local" else url
                dt, out = timed([exe, "bench-read", target, "--batches", str(n), "--cache", cache]
                                + common)
                res[what].append(dt)
                m = re.search(r"fetched from the URL: (\d+) bytes", out)
                if what == "epoch" and m:
                    fetched.append(int(m.group(1)))
                print(f"round {r + 1} {what:6s} {dt:8.2f} s", flush=True)
    finally:
        srv.terminate()
        srv.wait()
    med = {k: statistics.median(v) for k, v in res.items()}
    feat = int(re.search(r'"feature_bytes":\s*(\d+)', info).group(1)) if '"feature_bytes"' in info \
        else size
    print(f"\ndataset {size / 1e9:.2f} GB ({frames} frames), {batches} batches an epoch, "
          f"{a.rounds} rounds, medians:")
    for k in ("local", "first", "epoch", "again"):
        print(f"  {k:6s} {med[k]:8.2f} s   (runs: {', '.join(f'{v:.2f}' for v in res[k])})")
    print(f"epoch through an empty cache / cold local epoch (rate): {med['local'] / med['epoch']:.2f}x"
          "   (target >= 0.80)")
    if fetched:
        print(f"bytes fetched per epoch / feature bytes: {statistics.median(fetched) / feat:.3f}"
              "   (target <= 1.02)")
    print(f"second epoch through the cache / cold local epoch (rate): "
          f"{med['local'] / med['again']:.2f}x   (target >= 0.90)")
    print(f"time to first batch from an empty cache: {med['first']:.2f} s")


if __name__ == "__main__":
    main()
