"""Benchmark: the cost of the utterance count (issue 28's baseline).

Two datasets with the same frames, written once through ctxshard.Writer
and kept under --dir (reused while they open and hold what was asked):

- many:    N utterances of 8 frames x 4 dims (N = --utts, 10,000,000 by
           default);
- control: N/100 utterances of 800 frames x 4 dims.

Both float32, features only, guard 4 (= the context used below, so
windows are zero-copy), random values.  Then, --runs times, the two
datasets in alternating order, each held in the page cache first
(`ctxshard warm`), and every figure taken in a fresh process so that the
first open's costs are paid each time:

1. C open: `ctxshard info OUT` under `/usr/bin/time -f %M`, its wall time
   (taken by this script around the process) and its max RSS;
2. Python `ctxshard.open(OUT)`: its time and the anonymous memory it adds
   (RssAnon of /proc/self/status after - before; the package and torch
   imported before the clock starts);
3. `ctxshard.torch.Loader(OUT, 4, 1024, shuffle=True, labels=False)`:
   creation (which opens the dataset) to the first batch; the RssAnon it
   added by then; then --batches more batches in the same process,
   samples/s and minor faults per batch (each batch touched: x.sum());
4. `ctxshard.torch.UtteranceLoader(OUT, frame_budget=4096)` creation (and
   open) to the first batch, and the RssAnon it added;
   the peak RSS (VmHWM) of each Python process is kept too.

--stages: in every run, also bench/first_stages (C, fresh processes) on
both datasets: the wall and CPU time of each stage from open to the first
batch, for the utterance loader (sampler create, epoch plan, loader
create, first batch) and the frame loader; the CPU time (every thread)
moves less with the machine's load than the wall time.

--lib LABEL=PATH (repeatable): the same figures for each library given
(say, the build before a change and after it), interleaved in every run
(the order alternating from run to run), one table per library and a
table of the ratios of their medians.  The ctxshard command and
first_stages are this build's, run against each library
(LD_LIBRARY_PATH; the API they use is the same).

--madv: then, --runs times, bench/shuffle_madv (C, fresh processes) on
both datasets with the loader's default read-ahead, which marks the
feature mapping MADV_RANDOM (no fault-around), and with it off, all four
alternating: what MADV_RANDOM costs a shuffle of cached data here.

Medians, min and max over the runs, and many / control for every figure:
per-page costs are about equal in the two (same frames; the many dataset
has 1.5x the feature rows, its guard rows), so the ratio is what the
utterance count costs, and it survives this machine's drift better than
the absolute figures.  Prints a table; --json FILE writes everything.

usage: /usr/bin/python3 bench/many_utts.py [--utts 10000000] [--dir /tmp/cxs-many]
           [--runs 5] [--batches 200] [--json FILE] [--exe build/tools/ctxshard]
           [--build-only] [--madv] [--stages] [--lib LABEL=PATH ...] [--frames 8] [--dim 4]

--frames and --dim set the many dataset's shape (the control has 100x the
frames per utterance); the 100M-utterance run uses --frames 2 --dim 1."""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYDIR = os.path.join(ROOT, "python")
LIB = os.path.join(ROOT, "build", "lib", "libctxshard.so")

T_MANY, T_CONTROL, DIM, GUARD = 8, 800, 4, 4
CONTEXT, BATCH, BUDGET = 4, 1024, 4096


# -- in the child processes ----------------------------------------------

def _status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("RssAnon", "VmHWM", "VmRSS", "RssFile"):
                out[k] = int(v.split()[0]) / 1024  # MiB
    return out


def child(kind, path, seed, batches):
    """One measurement in this (fresh) process; prints a JSON object."""
    import ctxshard
    import ctxshard.torch as cxt  # and torch with it: imported before the clock starts
    before = _status()
    res = {}
    if kind == "open":
        t0 = time.perf_counter()
        ds = ctxshard.open(path)
        res["open_ms"] = (time.perf_counter() - t0) * 1e3
        after = _status()
        res["open_anon_mib"] = after["RssAnon"] - before["RssAnon"]
        res["utts"] = ds.num_utterances
        res["frames"] = ds.info["num_frames"]
        res["nbytes"] = ds.nbytes
    elif kind == "loader":
        t0 = time.perf_counter()
        loader = cxt.Loader(path, CONTEXT, BATCH, shuffle=True, seed=seed, labels=False)
        it = iter(loader)
        x = next(it)
        x.sum()
        res["loader_first_ms"] = (time.perf_counter() - t0) * 1e3
        res["loader_anon_mib"] = _status()["RssAnon"] - before["RssAnon"]
        res["threads"] = loader.threads
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        n = 0
        for x in it:
            x.sum()
            n += x.shape[0]
            if n >= batches * BATCH:
                break
        dt = time.perf_counter() - t0
        res["shuffle_batches"] = n / BATCH  # fewer than asked if the epoch ended first
        res["shuffle_samples_s"] = n / dt
        res["shuffle_minflt_per_batch"] = (
            resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / (n / BATCH)
        it.close()
        loader.close()
        res["loader_hwm_mib"] = _status()["VmHWM"]
    elif kind == "utt":
        t0 = time.perf_counter()
        loader = cxt.UtteranceLoader(path, frame_budget=BUDGET, seed=seed)
        it = iter(loader)
        b = next(it)
        b[0].sum()
        res["utt_first_ms"] = (time.perf_counter() - t0) * 1e3
        res["utt_anon_mib"] = _status()["RssAnon"] - before["RssAnon"]
        it.close()
        loader.close()
        res["utt_hwm_mib"] = _status()["VmHWM"]
    res["import_anon_mib"] = before["RssAnon"]
    print(json.dumps(res))


# -- in the parent ---------------------------------------------------------

def env(lib=None):
    e = dict(os.environ)
    e["PYTHONPATH"] = PYDIR + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    if lib:  # this library for the Python package and for the C programs
        e["CTXSHARD_LIB"] = lib
        e["LD_LIBRARY_PATH"] = os.path.dirname(lib)
    e.setdefault("CTXSHARD_LIB", LIB)
    return e


def build(out, n_utts, frames, seed):
    """n_utts utterances of `frames` frames x DIM through the Writer, once;
    returns the build record (kept beside the dataset)."""
    meta = out + ".build.json"
    want = {"utts": n_utts, "frames_per_utt": frames, "dim": DIM, "guard": GUARD,
            "dtype": "float32", "seed": seed}
    if os.path.isdir(out) and os.path.exists(meta):
        with open(meta) as f:
            rec = json.load(f)
        if all(rec.get(k) == v for k, v in want.items()):
            return rec
    sys.path.insert(0, PYDIR)
    os.environ.setdefault("CTXSHARD_LIB", LIB)
    import numpy as np
    import ctxshard
    if os.path.exists(out):
        shutil.rmtree(out)
    if os.path.exists(meta):
        os.remove(meta)
    rng = np.random.default_rng(seed)
    chunk = max(1, min(n_utts, 800_000 // frames))  # utterances per generated block
    print(f"writing {out}: {n_utts:,} utterances of {frames} x {DIM}", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    gen = 0.0
    with ctxshard.Writer(out, dtype="float32", guard=GUARD, dim=DIM) as w:
        for c0 in range(0, n_utts, chunk):
            c = min(chunk, n_utts - c0)
            g0 = time.perf_counter()
            block = rng.standard_normal((c * frames, DIM), dtype=np.float32)
            gen += time.perf_counter() - g0
            add = w.add
            for j in range(c):
                add(f"u{c0 + j:010d}", block[j * frames:(j + 1) * frames])
            done = c0 + c
            if done % (chunk * 10) == 0 or done == n_utts:
                el = time.perf_counter() - t0
                print(f"  {done:,} utterances, {el:.0f} s", file=sys.stderr, flush=True)
    dt = time.perf_counter() - t0
    size = sum(os.path.getsize(os.path.join(dp, f))
               for dp, _, fs in os.walk(out) for f in fs)
    shards = len([f for f in os.listdir(out) if f.startswith("shard-")])
    rec = dict(want, build_s=dt, generate_s=gen, utts_per_s=n_utts / dt, bytes=size,
               files=sorted(os.listdir(out)), shards=shards)
    with open(meta, "w") as f:
        json.dump(rec, f, indent=1)
    print(f"  done: {dt:.1f} s ({n_utts / dt:,.0f} utterances/s; {gen:.1f} s of it generating "
          f"random values), {size / 2**20:,.0f} MiB", file=sys.stderr, flush=True)
    return rec


def run_child(kind, path, seed, batches, lib=None):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, path,
                        "--seed", str(seed), "--batches", str(batches)],
                       env=env(lib), capture_output=True, text=True, timeout=1800)
    if p.returncode:
        sys.exit(f"child {kind} {path} failed (rc {p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def c_open(exe, path, lib=None):
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", exe, "info", path],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=1800, env=env(lib))
    dt = (time.perf_counter() - t0) * 1e3
    if p.returncode:
        sys.exit(f"ctxshard info {path} failed (rc {p.returncode}):\n{p.stderr}")
    return {"c_info_ms": dt, "c_info_maxrss_mib": int(p.stderr.strip().splitlines()[-1]) / 1024}


def stages(exe, path, lib=None):
    """bench/first_stages for both loaders: {figure: ms}."""
    out = {}
    for mode in ("utt", "frame"):
        p = subprocess.run([exe, path, mode, str(BUDGET)], env=env(lib), capture_output=True,
                           text=True, timeout=1800)
        if p.returncode:
            sys.exit(f"first_stages {path} {mode} failed (rc {p.returncode}):\n{p.stderr}")
        got = json.loads(p.stdout)
        for k in STAGES[mode]:
            out[f"c_{mode}_{k}"] = got[k]
    return out


# first_stages' figures kept, by mode
STAGES = {"utt": ["sampler_ms", "sampler_cpu_ms", "plan_ms", "plan_cpu_ms", "loader_ms",
                  "first_ms", "total_ms"],
          "frame": ["loader_ms", "loader_cpu_ms", "first_ms", "first_cpu_ms", "total_ms"]}
STAGE_LABELS = {
    "c_utt_sampler_ms": "C utterance sampler create",
    "c_utt_sampler_cpu_ms": "C utterance sampler create, CPU",
    "c_utt_plan_ms": "C epoch plan", "c_utt_plan_cpu_ms": "C epoch plan, CPU",
    "c_utt_loader_ms": "C utterance loader create", "c_utt_first_ms": "C utterance first batch",
    "c_utt_total_ms": "C open to first utterance batch",
    "c_frame_loader_ms": "C frame loader create",
    "c_frame_loader_cpu_ms": "C frame loader create, CPU",
    "c_frame_first_ms": "C frame first batch", "c_frame_first_cpu_ms": "C frame first batch, CPU",
    "c_frame_total_ms": "C open to first frame batch",
}


def uptime():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# figure -> (label, unit, format)
FIGURES = {
    "c_info_ms": ("C open: `ctxshard info` wall", "ms", "{:,.1f}"),
    "c_info_maxrss_mib": ("C open: `ctxshard info` max RSS", "MiB", "{:,.1f}"),
    "open_ms": ("Python ctxshard.open", "ms", "{:,.1f}"),
    "open_anon_mib": ("Python ctxshard.open: RssAnon added", "MiB", "{:,.1f}"),
    "loader_first_ms": ("Loader(shuffle) creation to first batch", "ms", "{:,.1f}"),
    "loader_anon_mib": ("Loader: RssAnon added at first batch", "MiB", "{:,.1f}"),
    "shuffle_samples_s": ("shuffle throughput", "samples/s", "{:,.0f}"),
    "shuffle_minflt_per_batch": ("shuffle: minor faults per batch", "", "{:,.1f}"),
    "loader_hwm_mib": ("Loader process peak RSS (VmHWM)", "MiB", "{:,.0f}"),
    "utt_first_ms": ("UtteranceLoader creation to first batch", "ms", "{:,.1f}"),
    "utt_anon_mib": ("UtteranceLoader: RssAnon added", "MiB", "{:,.1f}"),
    "utt_hwm_mib": ("UtteranceLoader process peak RSS (VmHWM)", "MiB", "{:,.0f}"),
    "import_anon_mib": ("RssAnon after imports (baseline)", "MiB", "{:,.1f}"),
}


def summary(values):
    return {"runs": values, "median": statistics.median(values), "min": min(values),
            "max": max(values)}


def main():
    global T_MANY, T_CONTROL, DIM
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--utts", type=int, default=10_000_000)
    ap.add_argument("--dir", default="/tmp/cxs-many")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--json")
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "tools", "ctxshard"))
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--madv", action="store_true")
    ap.add_argument("--stages", action="store_true")
    ap.add_argument("--lib", action="append", metavar="LABEL=PATH")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=int, default=T_MANY,
                    help="frames per utterance of the many dataset (the control has 100x)")
    ap.add_argument("--dim", type=int, default=DIM, help="feature width of both datasets")
    ap.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    T_MANY, T_CONTROL, DIM = a.frames, 100 * a.frames, a.dim
    if a.child:
        sys.path.insert(0, PYDIR)
        os.environ.setdefault("CTXSHARD_LIB", LIB)
        return child(a.child[0], a.child[1], a.seed, a.batches)
    if a.utts < 100 or a.utts % 100:
        sys.exit("--utts: a positive multiple of 100 (the control has --utts / 100 utterances)")
    os.makedirs(a.dir, exist_ok=True)
    # (the default shape keeps the names of the datasets earlier runs wrote)
    shape = "" if (a.frames, a.dim) == (8, 4) else f"-{a.frames}x{a.dim}"
    paths = {"many": os.path.join(a.dir, f"many-{a.utts}{shape}"),
             "control": os.path.join(a.dir, f"control-{a.utts // 100}{shape}")}
    builds = {"many": build(paths["many"], a.utts, T_MANY, 1),
              "control": build(paths["control"], a.utts // 100, T_CONTROL, 2)}
    if a.build_only:
        return
    libs = {}
    for spec in a.lib or []:
        label, sep, path = spec.partition("=")
        if not sep or not os.path.exists(path):
            sys.exit(f"--lib {spec}: LABEL=PATH of a libctxshard.so")
        libs[label] = os.path.abspath(path)
    if not libs:
        libs = {"this build": None}
    figs = dict(FIGURES)
    if a.stages:
        figs.update({k: (v, "ms", "{:,.1f}") for k, v in STAGE_LABELS.items()})
    stage_exe = os.path.join(os.path.dirname(a.exe), "..", "bench", "first_stages")
    load = [uptime()]
    res = {lb: {k: {f: [] for f in figs} for k in paths} for lb in libs}
    described = {}
    for r in range(a.runs):
        order = [(lb, n) for lb in libs for n in ("many", "control")]
        if r % 2:
            order.reverse()
        for label, name in order:
            lib, path = libs[label], paths[name]
            subprocess.run([a.exe, "warm", path, "--quiet"], check=True)
            got = c_open(a.exe, path, lib)
            for kind in ("open", "loader", "utt"):
                got.update(run_child(kind, path, r, a.batches, lib))
            if a.stages:
                got.update(stages(stage_exe, path, lib))
            described[name] = {k: got.pop(k) for k in ("utts", "frames", "nbytes", "threads",
                                                                "shuffle_batches")
                               if k in got}
            for f in figs:
                res[label][name][f].append(got[f])
            print(f"run {r + 1}/{a.runs} {label + ': ' if len(libs) > 1 else ''}{name}: info "
                  f"{got['c_info_ms']:.0f} ms, open {got['open_ms']:.0f} ms, Loader "
                  f"{got['loader_first_ms']:.0f} ms, UtteranceLoader {got['utt_first_ms']:.0f} ms, "
                  f"{got['shuffle_samples_s']:,.0f} samples/s  (load {uptime()})",
                  file=sys.stderr, flush=True)
    load.append(uptime())

    figures = {}
    for label in libs:
        figures[label] = {}
        for f in figs:
            m, c = summary(res[label]["many"][f]), summary(res[label]["control"][f])
            figures[label][f] = {"label": figs[f][0], "unit": figs[f][1], "many": m, "control": c,
                                 "ratio": m["median"] / c["median"] if c["median"] else None}
    dm, dc = described["many"], described["control"]
    head = (f"many: {dm['utts']:,} utterances x {T_MANY} frames x {DIM}, "
            f"{dm['nbytes'] / 2**20:,.0f} MiB; control: {dc['utts']:,} x {T_CONTROL} x {DIM}, "
            f"{dc['nbytes'] / 2**20:,.0f} MiB; {dm['frames']:,} frames each, float32, guard "
            f"{GUARD}; {a.runs} runs (fresh processes, warm page cache), medians [min-max]; "
            f"Loader context {CONTEXT}, batch {BATCH}, {dm.get('threads')} threads, throughput "
            f"over {a.batches} batches; UtteranceLoader frame budget {BUDGET}; "
            f"{os.cpu_count()} CPUs, load average {load[0]} before, {load[1]} after")
    print(head)

    def cell(f, s):
        fmt = figs[f][2]
        return f"{fmt.format(s['median'])} [{fmt.format(s['min'])}-{fmt.format(s['max'])}]"
    for label in libs:
        print()
        if len(libs) > 1:
            print(f"{label} ({libs[label]}):")
            print()
        print("| figure | many | control | many / control |")
        print("|---|---:|---:|---:|")
        for f, v in figures[label].items():
            unit = figs[f][1]
            ratio = "-" if v["ratio"] is None else f"{v['ratio']:.2f}x"
            print(f"| {v['label']}{' (' + unit + ')' if unit else ''} | {cell(f, v['many'])} | "
                  f"{cell(f, v['control'])} | {ratio} |")
    if len(libs) > 1:
        base, *others = list(libs)
        for other in others:
            print()
            print(f"| figure: median {other} / {base} | many | control |")
            print("|---|---:|---:|")
            for f in figs:
                def q(name):
                    x, y = (figures[other][f][name]["median"], figures[base][f][name]["median"])
                    return f"{x / y:.2f}x" if y else "-"
                print(f"| {figs[f][0]} | {q('many')} | {q('control')} |")
    print()
    for name in ("many", "control"):
        b = builds[name]
        print(f"{name}: written by the Python Writer in {b['build_s']:.1f} s "
              f"({b['utts_per_s']:,.0f} utterances/s, of which {b['generate_s']:.1f} s "
              f"generating the values), {b['bytes'] / 2**20:,.0f} MiB on disk")
    madv = None
    if a.madv:
        exe = os.path.join(os.path.dirname(a.exe), "..", "bench", "shuffle_madv")
        madv = {f"{n}/{m}": [] for n in paths for m in ("auto", "off")}
        for r in range(a.runs):
            for key in (list(madv) if r % 2 == 0 else list(reversed(list(madv)))):
                name, mode = key.split("/")
                p = subprocess.run([exe, paths[name], mode, str(a.batches)], env=env(),
                                   capture_output=True, text=True, timeout=1800)
                if p.returncode:
                    sys.exit(f"shuffle_madv failed: {p.stderr}")
                madv[key].append(json.loads(p.stdout))
        print()
        print("| shuffle from C, %d batches (samples/s) | many | control | many / control |"
              % a.batches)
        print("|---|---:|---:|---:|")
        for mode in ("auto", "off"):
            m = statistics.median(x["samples_s"] for x in madv[f"many/{mode}"])
            c = statistics.median(x["samples_s"] for x in madv[f"control/{mode}"])
            fm = statistics.median(x["minflt_per_batch"] for x in madv[f"many/{mode}"])
            fc = statistics.median(x["minflt_per_batch"] for x in madv[f"control/{mode}"])
            label = ("read-ahead on (MADV_RANDOM)" if mode == "auto"
                     else "read-ahead off (fault-around)")
            print(f"| {label} | {m:,.0f} ({fm:.1f} faults/batch) | {c:,.0f} ({fc:.1f}) | "
                  f"{m / c:.2f}x |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"config": {"utts": a.utts, "runs": a.runs, "batches": a.batches,
                                  "context": CONTEXT, "batch": BATCH, "frame_budget": BUDGET,
                                  "dim": DIM, "guard": GUARD, "cpus": os.cpu_count(),
                                  "load_before": load[0], "load_after": load[1]},
                       "madv": madv, "libs": libs,
                       "datasets": {k: dict(described[k], path=paths[k], build=builds[k])
                                    for k in paths},
                       "figures": figures}, f, indent=1)


if __name__ == "__main__":
    main()
