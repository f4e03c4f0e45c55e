"""Benchmark: the writer on millions of tiny utterances (issue 28), the C
writer (bench/writer_bench.c) and the Python Writer, one at a time (add)
and in batches (add_many), interleaved round by round in one run, and,
with --base, the same contenders built from another checkout (the commit
before a change) in the same rounds.

Every contender writes N utterances of 8 frames x 4 float32 dimensions,
features only, guard 4, block sums on (the defaults otherwise), in a fresh
process, ids made before the clock starts; the time runs from the
writer's creation to the end of its commit (the fsyncs included).  Prints
the median and [min-max] utterances/s of each, the ratio of each to the
base's one-at-a-time C writer (or to this build's, without --base), and
the load average before and after; the outputs of every contender are
compared byte for byte.

usage: /usr/bin/python3 bench/writer_speed.py [--utts 1000000] [--repeats 5]
           [--build build] [--base BASE_SOURCE_DIR [--base-build DIR]]
           [--batch 4096] [--dir DIR]

--base names a checkout of an older commit built in BASE/build (or
--base-build); its writer_bench is compiled here from this checkout's
bench/writer_bench.c against its headers and library (add only, when it
has no cxs_writer_add_many).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The Python contender: N utterances through ctxshard.Writer; prints seconds.
PY_CHILD = """
import sys, time
import numpy as np
import ctxshard
out, n, mode, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
x = np.tile((np.arange(32, dtype=np.float32) * 0.25 - 3.0).reshape(8, 4), (n, 1))
ids = [f"u{i:010d}" for i in range(n)]
t0 = time.perf_counter()
with ctxshard.Writer(out, guard=4, dim=4) as w:
    if mode == "add":
        add = w.add
        for i in range(n):
            add(ids[i], x[8 * i:8 * i + 8])
    else:
        lens = np.full(batch, 8)
        for s in range(0, n, batch):
            e = min(n, s + batch)
            w.add_many(ids[s:e], x[8 * s:8 * e], lens[:e - s])
print(time.perf_counter() - t0)
"""


def has_add_many(src):
    with open(os.path.join(src, "lib", "include", "ctxshard_writer.h")) as f:
        return "cxs_writer_add_many" in f.read()


def compile_bench(src, build, exe):
    """writer_bench.c of this checkout against src's headers and build's library."""
    cc = os.environ.get("CC", "cc")
    cmd = [cc, "-O2", "-std=c11", "-D_GNU_SOURCE", os.path.join(HERE, "writer_bench.c"),
           "-I", os.path.join(src, "lib", "include"), "-I", os.path.join(src, "format"),
           "-I", build, "-I", os.path.join(build, "format"), "-I", os.path.join(build, "lib"),
           "-L", os.path.join(build, "lib"), "-lctxshard",
           "-Wl,-rpath," + os.path.abspath(os.path.join(build, "lib")), "-o", exe]
    if not has_add_many(src):
        cmd.insert(1, "-DWRITER_BENCH_ADD_ONLY")
    subprocess.run(cmd, check=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--utts", type=int, default=1000000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--base", default=None, help="source dir of the commit to compare with")
    ap.add_argument("--base-build", default=None, help="its build dir (default BASE/build)")
    ap.add_argument("--batch", type=int, default=4096, help="utterances per add_many call")
    ap.add_argument("--python-utts", type=int, default=None,
                    help="N for the one-at-a-time Python contenders (default --utts)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    a = ap.parse_args()
    work = a.dir or tempfile.mkdtemp(prefix="ctxshard-wspeed-")
    os.makedirs(work, exist_ok=True)
    n, npy = a.utts, a.python_utts or a.utts

    builds = []  # (label, source dir, build dir, has add_many)
    if a.base:
        bb = a.base_build or os.path.join(a.base, "build")
        builds.append(("base", a.base, bb, has_add_many(a.base)))
    builds.append(("new", ROOT, a.build, has_add_many(ROOT)))

    contenders = {}  # name -> (argv, env, utterances)
    for label, src, bld, many in builds:
        exe = os.path.join(bld, "bench", "writer_bench")
        if label == "base" or not os.path.exists(exe):
            exe = os.path.join(work, f"writer_bench-{label}")
            compile_bench(src, bld, exe)
        env = dict(os.environ, PYTHONPATH=os.path.join(src, "python"),
                   CTXSHARD_LIB=os.path.join(bld, "lib", "libctxshard.so"))
        out = os.path.join(work, "out")
        contenders[f"C add ({label})"] = ([exe, out, str(n), "add"], env, n, "c")
        if many:
            contenders[f"C add_many ({label})"] = (
                [exe, out, str(n), "many", str(a.batch)], env, n, "c")
        py = ["/usr/bin/python3", "-c", PY_CHILD, out]
        contenders[f"Python add ({label})"] = (py + [str(npy), "add", "1"], env, npy, "py")
        if many:
            contenders[f"Python add_many ({label})"] = (
                py + [str(n), "many", str(a.batch)], env, n, "py")

    load0 = os.getloadavg()
    print(f"{n:,} utterances of 8 frames x 4 float32 (Python add: {npy:,}), guard 4, "
          f"block sums, {a.repeats} rounds interleaved; load average {load0[0]:.2f} "
          f"{load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} CPUs", flush=True)
    rates = {k: [] for k in contenders}
    ref_files = {}
    for r in range(a.repeats):
        for k, (argv, env, count, kind) in contenders.items():
            out = argv[3] if kind == "py" else argv[1]
            shutil.rmtree(out, ignore_errors=True)
            p = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
            secs = float(p.stdout.split()[0])
            rates[k].append(count / secs)
            if r == 0:  # every contender's bytes against the first of its size
                prev = ref_files.get(count)
                if prev is None:
                    ref_files[count] = os.path.join(work, f"ref-{count}")
                    shutil.rmtree(ref_files[count], ignore_errors=True)
                    os.rename(out, ref_files[count])
                else:
                    same = subprocess.run(["diff", "-r", prev, out],
                                          stdout=subprocess.DEVNULL).returncode == 0
                    if not same:
                        sys.exit(f"{k}: output differs from the first contender's")
            shutil.rmtree(out, ignore_errors=True)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1] / 1e3:.0f}K"
                                                for k, v in rates.items()), flush=True)
    load1 = os.getloadavg()
    ref_name = "C add (base)" if a.base else "C add (new)"
    ref = statistics.median(rates[ref_name])
    print(f"\n{'':26s} {'median utts/s':>14s} {'[min - max]':>22s} {'vs ' + ref_name:>16s}")
    for k, v in rates.items():
        m = statistics.median(v)
        print(f"{k:26s} {m:14,.0f} [{min(v):9,.0f} - {max(v):9,.0f}] {m / ref:15.2f}x")
    print(f"outputs byte-identical: yes; load average after {load1[0]:.2f} {load1[1]:.2f} "
          f"{load1[2]:.2f}")
    for p in ref_files.values():
        shutil.rmtree(p, ignore_errors=True)
    if not a.dir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
