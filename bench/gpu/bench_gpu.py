"""Benchmark: batches of windows delivered into GPU memory, competitors side
by side in one run on the same data (k=30, B=1024 and 8192, float32 and
float16 storage, >= 20M frames by default).

Rows (samples/s delivered to the device, medians of --repeats):
  pcie       the floor: a plain loop of pinned host -> device copies of one
             batch's bytes (cudaMemcpyAsync through torch), GB/s;
  dataloader torch DataLoader over the recitation-optimised Dataset (all
             features in RAM, each utterance padded once, cumsum index,
             views), pin_memory=True, 8 workers, then
             .to(device, non_blocking=True);
  stream     ctxshard Loader(device='cuda', gpu_mode='stream');
  resident   ctxshard Loader(device='cuda', gpu_mode='resident') (the one-time
             upload is reported separately);
  pool       ctxshard Loader(device='cuda', gpu_mode='pool') with a budget of
             a third of the features.
Then a dummy training step (an MLP on the windows, forward + backward +
SGD) timed alone on a fixed device batch, and with each loader feeding it:
'hidden' is the share of the loader's own time per batch that the step
hides, 1 - (t_both - t_step) / t_loader.

Every row runs in its own process and times five windows of its batches;
its figure is their median (and the median over --repeats runs).  The recitation Dataset is built from
the packed dataset's utterances (the same arrays np.load would give; loading
16,000 .npy files would only lengthen the run, not change the row).

usage: python3 bench/gpu/bench_gpu.py [--build build] [--dir DIR] [--utts 16000]
           [--repeats 1] [--json FILE] [--markdown FILE] [--jsonl FILE] [--quick]
           [--deadline SECONDS]
--quick: B=1024 only, fewer batches, 4,000 utterances unless --utts says.
Rows are written as each finishes (--jsonl appends, --json and --markdown
are rewritten), so a run cut short keeps what it measured."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
K = 30


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---- rows (each in a child process) --------------------------------------------

def recitation(packed):
    import numpy as np
    import torch
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import ctxshard

    class Recitation(torch.utils.data.Dataset):
        """The course recitation's advice: everything in RAM, each utterance
        padded once, a cumsum index, views returned."""

        def __init__(self):
            ds = ctxshard.open(packed)
            xs, ys, starts, off = [], [], [], 0
            for u in range(ds.num_utterances):
                _, x, y = ds.utterance(u)
                xs.append(np.pad(np.asarray(x, dtype=np.float32), ((K, K), (0, 0))))
                ys.append(np.asarray(y, dtype=np.int64))
                starts.append(off + np.arange(len(x)))
                off += len(x) + 2 * K
            self.x = torch.from_numpy(np.concatenate(xs))
            self.y = torch.from_numpy(np.concatenate(ys))
            self.start = np.concatenate(starts)

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            s = self.start[i]
            return self.x[s:s + 2 * K + 1].reshape(-1), self.y[i]

    return Recitation()


def make_iter(row, packed, B, dev, threads):
    import torch
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import ctxshard.torch as cxt
    if row == "dataloader":
        ds = recitation(packed)
        dl = torch.utils.data.DataLoader(ds, batch_size=B, shuffle=True, num_workers=8,
                                         pin_memory=True, persistent_workers=True,
                                         prefetch_factor=4, generator=torch.Generator().manual_seed(0))

        def gen():
            while True:
                for x, y in dl:
                    yield x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        return gen(), {}
    mode = row
    budget = None
    if row == "pool":
        import ctxshard
        budget = ctxshard.open(packed).info["feature_bytes"] // 3
    L = cxt.Loader(packed, K, B, shuffle=True, seed=0, device=dev, threads=threads,
                   gpu_mode=mode, gpu_budget=budget)

    def gen():
        while True:
            for x, y in L:
                yield x, y
    it = gen()
    next(it)  # creates the device loader (the resident upload happens here)
    return it, dict(L.gpu_info or {}, gpu_mode=L.gpu_mode)


def model(W):
    import torch
    return torch.nn.Sequential(torch.nn.Linear(W, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
                               torch.nn.Linear(2048, 42)).cuda()


def run_row(a):
    import torch
    dev = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = True
    B, n = a.batch, a.batches
    out = {}
    if a.row == "pcie":
        W = (2 * K + 1) * a.dim
        h = torch.empty((B, W), dtype=torch.float32, pin_memory=True).fill_(1)
        d = torch.empty((B, W), dtype=torch.float32, device=dev)
        for _ in range(5):
            d.copy_(h, non_blocking=True)
        per = []
        for _ in range(5):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                d.copy_(h, non_blocking=True)
            torch.cuda.synchronize()
            per.append((time.perf_counter() - t0) / n)
        dt = statistics.median(per)
        out["gbps"] = h.numel() * 4 / dt / 1e9
        out["rate"] = B / dt
        print(json.dumps(out), flush=True)
        return
    t0 = time.perf_counter()
    it, info = make_iter(a.row, a.packed, B, dev, a.threads)
    out["setup_s"] = time.perf_counter() - t0
    out.update({k: info[k] for k in ("gpu_mode", "upload_path", "upload_seconds", "device_bytes")
                if k in info})
    for _ in range(3):  # warm-up: workers started, pipelines full
        x, y = next(it)
    torch.cuda.synchronize()
    # five timed windows of n/5 batches each; the row's figure is their median
    per = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(max(1, n // 5)):
            x, y = next(it)
        torch.cuda.synchronize()
        per.append((time.perf_counter() - t0) / max(1, n // 5))
    t_load = statistics.median(per)
    out["rate"] = B / t_load
    # the dummy training step, alone on a fixed batch, then fed by the loader
    W = x.shape[1]
    net = model(W)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)
    lossf = torch.nn.CrossEntropyLoss()
    xf, yf = x.float().clone(), y.clone()

    def step(xb, yb):
        opt.zero_grad(set_to_none=True)
        lossf(net(xb.float()), yb).backward()
        opt.step()
    for _ in range(5):
        step(xf, yf)
    torch.cuda.synchronize()
    steps = max(10, n // 2)
    t0 = time.perf_counter()
    for _ in range(steps):
        step(xf, yf)
    torch.cuda.synchronize()
    t_step = (time.perf_counter() - t0) / steps
    t0 = time.perf_counter()
    for _ in range(steps):
        x, y = next(it)
        step(x, y)
    torch.cuda.synchronize()
    t_both = (time.perf_counter() - t0) / steps
    out.update(t_load_ms=t_load * 1e3, t_step_ms=t_step * 1e3, t_both_ms=t_both * 1e3,
               hidden=max(0.0, min(1.0, 1 - (t_both - t_step) / t_load)))
    print(json.dumps(out), flush=True)
    os._exit(0)  # DataLoader workers and loaders go with the process


# ---- the driver -------------------------------------------------------------------

def synth(exe, raw, utts, dim, procs):
    """Synthesise utts utterances with procs processes (disjoint id ranges
    of one seed), merged into one raw directory."""
    parts, per = [], -(-utts // procs)
    jobs = []
    for p in range(procs):
        n = min(per, utts - p * per)
        if n <= 0:
            break
        d = raw + f".part{p}"
        parts.append(d)
        jobs.append(subprocess.Popen([exe, "synth", d, "--utts", str(n), "--offset", str(p * per),
                                      "--seed", "2", "--dim", str(dim), "--quiet"]))
    for j in jobs:
        if j.wait():
            raise SystemExit("synth failed")
    for sub in ("mfcc", "transcript"):
        os.makedirs(os.path.join(raw, sub))
        for d in parts:
            for f in os.listdir(os.path.join(d, sub)):
                os.rename(os.path.join(d, sub, f), os.path.join(raw, sub, f))
    for d in parts:
        shutil.rmtree(d)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--row")
    ap.add_argument("--packed")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=28)
    ap.add_argument("--dir")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--utts", type=int, default=16000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    ap.add_argument("--quick", action="store_true", help="one size, fewer batches")
    ap.add_argument("--timeout", type=int, default=240, help="seconds per row process")
    ap.add_argument("--jsonl", help="each row appended as one JSON line as it finishes")
    ap.add_argument("--deadline", type=float, default=0,
                    help="seconds from the start after which no row starts and a row's "
                         "timer is cut to what is left (0: none)")
    a = ap.parse_args()
    if a.row:
        run_row(a)
        return
    t_begin = time.monotonic()
    if a.quick and a.utts == 16000:
        a.utts = 4000  # about 5M frames: data, rows and uploads within ~4 minutes
    exe = os.path.join(a.build, "tools", "ctxshard")
    work = a.dir or tempfile.mkdtemp(prefix="ctxshard-gpu-bench-")
    raw = os.path.join(work, "raw")
    t0 = time.perf_counter()
    if not os.path.exists(os.path.join(work, "f32")):
        shutil.rmtree(raw, ignore_errors=True)
        synth(exe, raw, a.utts, a.dim, min(8, os.cpu_count() or 1))
        for dt in ("f32", "f16"):
            subprocess.run([exe, "pack", raw, os.path.join(work, dt), "--dtype", dt, "--quiet"],
                           check=True)
        shutil.rmtree(raw)
    info = json.loads(subprocess.run([exe, "info", os.path.join(work, "f32"), "--json"],
                                     check=True, capture_output=True, text=True).stdout)
    frames = info["frames"]
    log(f"data: {frames} frames x {a.dim} in {time.perf_counter() - t0:.1f} s ({work})")
    env = dict(os.environ, CTXSHARD_LIB=os.path.join(a.build, "lib", "libctxshard.so"),
               PYTHONUNBUFFERED="1")
    sizes = [1024] if a.quick else [1024, 8192]
    rows = ["pcie", "dataloader", "stream", "resident", "pool"]
    results = []
    for rep in range(a.repeats):
        for dt in ("f32", "f16"):
            for B in sizes:
                for row in rows:
                    if row in ("pcie", "dataloader") and dt == "f16":
                        continue  # they do not read the packed storage type
                    nb = max(8, (a.batches if B == 1024 else a.batches // 4) // (4 if row == "dataloader" else 1))
                    if a.quick:
                        nb = max(8, nb // 2)
                    limit = a.timeout
                    if a.deadline:
                        limit = min(limit, int(a.deadline - (time.monotonic() - t_begin)))
                        if limit < 20:
                            log(f"{row} {dt} B={B}: not started, past the deadline")
                            continue
                    cmd = [sys.executable, __file__, "--row", row, "--packed", os.path.join(work, dt),
                           "--batch", str(B), "--batches", str(nb), "--dim", str(a.dim),
                           "--threads", str(a.threads)]
                    try:
                        p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                           timeout=limit)
                        if p.returncode:
                            log(f"{row} {dt} B={B}: failed\n{p.stderr[-3000:]}")
                            continue
                        r = json.loads(p.stdout.strip().splitlines()[-1])
                    except subprocess.TimeoutExpired:
                        log(f"{row} {dt} B={B}: timed out after {limit} s")
                        continue
                    r.update(row=row, dtype=dt, batch=B, rep=rep)
                    results.append(r)
                    log(json.dumps(r))
                    write(a, results, frames)  # what finished survives a cut run
    md = write(a, results, frames, append=False)
    print(md)
    if not a.dir:
        shutil.rmtree(work)


def write(a, results, frames, append=True):
    """Write the rows so far: --jsonl gets the last one, --json and
    --markdown are rewritten whole.  Returns the markdown table."""
    if append and a.jsonl and results:
        with open(a.jsonl, "a") as f:
            f.write(json.dumps(results[-1]) + "\n")
    table = summarise(results, a.dim)
    if a.json:
        with open(a.json + ".tmp", "w") as f:
            json.dump({"frames": frames, "dim": a.dim, "k": K, "results": results,
                       "summary": table}, f, indent=1)
        os.replace(a.json + ".tmp", a.json)
    md = markdown(table, frames, a.dim)
    if a.markdown:
        with open(a.markdown + ".tmp", "w") as f:
            f.write(md)
        os.replace(a.markdown + ".tmp", a.markdown)
    return md


def summarise(results, dim):
    W = (2 * K + 1) * dim
    groups = {}
    for r in results:
        groups.setdefault((r["row"], r["dtype"], r["batch"]), []).append(r)
    out = []
    for (row, dt, B), rs in groups.items():
        m = {k: statistics.median(r[k] for r in rs) for k in rs[0]
             if isinstance(rs[0][k], (int, float)) and k not in ("rep", "batch")}
        m.update(row=row, dtype=dt, batch=B)
        for k in ("gpu_mode", "upload_path"):
            if k in rs[0]:
                m[k] = rs[0][k]
        out.append(m)
    by = {(m["row"], m["dtype"], m["batch"]): m for m in out}
    for m in out:
        base = by.get(("dataloader", "f32", m["batch"]))
        if base and m["row"] != "pcie":
            m["x_dataloader"] = m["rate"] / base["rate"]
        pcie = by.get(("pcie", "f32", m["batch"]))
        if pcie and m["row"] in ("stream", "dataloader"):
            moved = m["rate"] * (W * 4 + 8)  # x float32 and y int64 per sample
            m["of_pcie_floor"] = moved / (pcie["gbps"] * 1e9)
    return out


def markdown(table, frames, dim):
    lines = [f"k={K}, D={dim}, {frames} frames; samples/s delivered to the device (medians)\n",
             "| row | storage | B | samples/s | x DataLoader | of PCIe floor | step ms | "
             "loader ms | both ms | hidden | notes |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {"pcie": 0, "dataloader": 1, "stream": 2, "resident": 3, "pool": 4}
    for m in sorted(table, key=lambda m: (m["batch"], m["dtype"] != "f32", order[m["row"]])):
        note = ""
        if m["row"] == "pcie":
            note = f"{m['gbps']:.1f} GB/s"
        elif "upload_seconds" in m and m["row"] in ("resident", "pool"):
            note = f"upload {m['upload_seconds']:.2f} s ({m.get('upload_path', '')})"

        def f(k, fmt):
            return format(m[k], fmt) if k in m else ""
        lines.append(f"| {m['row']} | {m['dtype']} | {m['batch']} | {m['rate']:,.0f} | "
                     f"{f('x_dataloader', '.1f')} | {f('of_pcie_floor', '.0%')} | "
                     f"{f('t_step_ms', '.2f')} | {f('t_load_ms', '.2f')} | {f('t_both_ms', '.2f')} | "
                     f"{f('hidden', '.0%')} | {note} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
