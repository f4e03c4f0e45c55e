"""Datasets at URLs against a local copy, side by side in one run: nginx on
127.0.0.1 serves a dataset of >= 1 GB, and each round (in alternating
order) times `bench-read --sampler block` for one epoch, with the page
cache dropped before each run (needs root):

  local    over the local copy, cold;
  first    over the URL, streamed, empty cache: to the first batch (the
           metadata, then the first round's blocks);
  epoch    over the URL, streamed, empty cache: the epoch (the features
           fetched block by block ahead of the loader);
  again    the epoch once more over the URL, the cache now holding every
           block (cold page cache: read from the local disk like local);
  small    streamed through a cache limited to --small times --memory
           (what a round needs and the metadata, not the dataset);
  whole    --no-stream, empty cache: the dataset downloaded and verified
           whole, then the epoch (the path of a full shuffle).

It reports the medians and the ratios the issue asks for: the epoch
through an empty cache against the cold local epoch (rate); bytes fetched
per epoch over the feature bytes, with a cache that holds a round's blocks
and with one that holds the dataset; the second epoch against local; the
time to first batch; the range requests of each run and the most begun
in one millisecond (nginx's access log: requests sent together).

usage: sudo /usr/bin/python3 bench/remote.py [--build build] [--dir /tmp/remotebench]
           [--utts 7000] [--rounds 3] [--memory 512M] [--small 1.3]"""
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


def nginx(www, ng):
    """nginx serving directory www on a free port of 127.0.0.1 (its files
    in ng): the process and the port."""
    port = free_port()
    os.makedirs(ng, exist_ok=True)
    with open(os.path.join(ng, "nginx.conf"), "w") as f:
        temp = " ".join(f"{k}_temp_path {ng}/{k};" for k in
                        ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        f.write(f"daemon off; worker_processes 2; pid {ng}/nginx.pid; error_log {ng}/error.log;\n"
                "events { worker_connections 256; }\n"
                # each request's end and length: the requests of a run
                "http { log_format t '$msec $request_time';\n"
                f"  access_log {ng}/access.log t; sendfile on; {temp}\n"
                f"  server {{ listen 127.0.0.1:{port}; root {www}; }} }}\n")
    srv = subprocess.Popen(["nginx", "-c", os.path.join(ng, "nginx.conf"), "-p", ng])
    time.sleep(0.5)
    return srv, port


def in_flight(log, since):
    """The requests nginx logged after byte `since` of its access log: how
    many, the most that began in one millisecond (its log's resolution: a
    request on 127.0.0.1 ends within the millisecond it began, so this is
    what shows requests sent together), and the log's length now."""
    with open(log) as f:
        f.seek(since)
        text = f.read()
    starts = {}
    for line in text.splitlines():
        end, took = map(float, line.split())
        ms = round((end - took) * 1000)
        starts[ms] = starts.get(ms, 0) + 1
    return sum(starts.values()), max(starts.values(), default=0), since + len(text)


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
    ap.add_argument("--runs", default="local,first,epoch,again,small,whole",
                    help="which runs, comma-separated")
    ap.add_argument("--server-warm", action="store_true",
                    help="after each drop of the page cache, read the served files back into "
                    "it: a server with storage of its own (here nginx shares the one disk with "
                    "the cache and the local copy)")
    ap.add_argument("--small", type=float, default=1.3,
                    help="the cache limit of the 'small' runs, a multiple of --memory (it must "
                    "hold the metadata and (blocks + 2) / (blocks + 1) of --memory)")
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
    srv, port = nginx(www, os.path.join(a.dir, "nginx"))
    url = f"http://127.0.0.1:{port}/ds"
    cache, small = os.path.join(a.dir, "cache"), os.path.join(a.dir, "cache-small")
    mem = int(a.memory[:-1]) << {"K": 10, "M": 20, "G": 30}[a.memory[-1]] \
        if a.memory[-1] in "KMG" else int(a.memory)
    limit = int(mem * a.small)
    common = ["--sampler", "block", "--memory", a.memory, "--context", "30", "--batch", "1024"]
    names = tuple(n for n in ("local", "first", "epoch", "again", "small", "whole")
                  if n in a.runs.split(","))
    res = {k: [] for k in names}
    flight = {k: [] for k in names}
    log = os.path.join(a.dir, "nginx", "access.log")
    logged = os.path.getsize(log) if os.path.exists(log) else 0  # (an earlier run's lines)
    fetched = {k: [] for k in names}
    firsts = {k: [] for k in names}
    try:
        for r in range(a.rounds):
            order = list(names) if r % 2 == 0 else [n for n in ("whole", "small", "first", "epoch",
                                                                "again", "local") if n in names]
            for what in order:
                if what in ("first", "epoch", "whole"):
                    shutil.rmtree(cache, ignore_errors=True)
                if what == "small":
                    shutil.rmtree(small, ignore_errors=True)
                drop_caches()
                if a.server_warm and what != "local":
                    for f in os.listdir(ds):
                        with open(os.path.join(ds, f), "rb") as fh:
                            while fh.read(8 << 20):
                                pass
                n = 1 if what == "first" else batches
                target = ds if what == "local" else url
                extra = {"small": ["--cache", small, "--cache-limit", str(limit)],
                         "whole": ["--cache", cache, "--no-stream"]}.get(what, ["--cache", cache])
                dt, out = timed([exe, "bench-read", target, "--batches", str(n)] + extra + common)
                res[what].append(dt)
                m = re.search(r"(\d+) bytes of features while reading", out)
                if m:
                    fetched[what].append(int(m.group(1)))
                m = re.search(r"first batch ([0-9.]+) ms", out)
                if m:
                    firsts[what].append(float(m.group(1)) / 1e3)
                count, most, logged = in_flight(log, logged)
                if what != "local":
                    flight[what].append((count, most))
                print(f"round {r + 1} {what:6s} {dt:8.2f} s   {count} requests, at most {most} "
                      "begun in one millisecond", flush=True)
    finally:
        srv.terminate()
        srv.wait()
    med = {k: statistics.median(v) for k, v in res.items()}
    feat = int(re.search(r'"feature_bytes":\s*(\d+)', info).group(1))
    print(f"\ndataset {size / 1e9:.2f} GB ({frames} frames, {feat / 1e9:.2f} GB of features), "
          f"{batches} batches an epoch, {a.rounds} rounds, 'small' cache limit {limit / 1e9:.2f} "
          f"GB ({limit / size:.2f} of the dataset); medians (wall time of the command):")
    for k in names:
        print(f"  {k:6s} {med[k]:8.2f} s   (runs: {', '.join(f'{v:.2f}' for v in res[k])})")
    for k in names:
        if flight[k]:
            print(f"  {k:6s} {statistics.median(c for c, _ in flight[k]):.0f} requests (median), "
                  f"at most {max(x for _, x in flight[k])} begun in one millisecond")
    print(f"server's files {'warm (read back after each drop)' if a.server_warm else 'cold'}")

    def ratio(x, y):
        return f"{med[x] / med[y]:.2f}x" if x in med and y in med else "not run"
    print(f"epoch through an empty cache, streamed / cold local epoch (rate): "
          f"{ratio('local', 'epoch')}   (target >= 0.80)")
    for k in ("epoch", "small"):
        if fetched.get(k):
            print(f"bytes fetched per epoch / feature bytes ({k}): "
                  f"{statistics.median(fetched[k]) / feat:.3f}   (target <= 1.02)")
    print(f"second epoch through the cache / cold local epoch (rate): "
          f"{ratio('local', 'again')}   (target >= 0.90)")
    print(f"whole download first (--no-stream) / cold local epoch (rate): "
          f"{ratio('local', 'whole')}")
    if "first" in med:
        print(f"time to first batch from an empty cache, streamed: {med['first']:.2f} s "
              f"(the command); the loader's own: {statistics.median(firsts['first']):.2f} s")


if __name__ == "__main__":
    main()
