"""What the GPU loader holds and sends for q8 and q16 against float32 of the
same data, in every mode, on the emulated device (no GPU needed: byte
counts are the loader's own, not timings).

    /usr/bin/python3 bench/gpu/qupload.py --build build [--utts 1000] [--dim 40]
        [--context 5] [--batch 256] [--budget-mib 16]

One synthesised dataset (LibriSpeech-like lengths) packed as f32, q8 and
q16 in one shard each.  Per dtype:
  - resident: device bytes and the bytes uploaded at create (the resident
    data: the utterances a budget holds scale with its inverse);
  - pool at --budget-mib: rows a segment (its reason's layout) and
    utterances a segment (pool_utterances), and the bytes an epoch uploads;
  - stream: the bytes an epoch uploads, per batch;
each with its ratio to float32 (targets: 0.25x q8, 0.5x q16; 4x and 2x
the pool's capacity).  Ratios only: every figure is a count, the same on
any machine."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--utts", type=int, default=1000)
ap.add_argument("--dim", type=int, default=40)
ap.add_argument("--context", type=int, default=5)
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--budget-mib", type=float, default=16)
a = ap.parse_args()

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(a.build)
EXE = os.path.join(BUILD, "tools", "ctxshard")
os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
sys.path.insert(0, os.path.join(SRC, "python"))

import ctxshard  # noqa: E402
import ctxshard.gpu as G  # noqa: E402

DTYPES = ("f32", "q8", "q16")


def epoch(path, mode, budget):
    """One shuffled epoch of the GPU loader: (info, batches)."""
    with ctxshard.open(path) as ds:
        s = ctxshard.Sampler(ds, ctxshard.SHUFFLE, seed=1)
        with G.GpuLoader(ds, s, a.context, a.batch, device=G.EMULATE, mode=mode,
                         budget=budget) as L:
            n = 0
            while L.next() is not None:
                n += 1
            G.emulated_sync()
            return L.info(), n


def main():
    tmp = tempfile.mkdtemp(prefix="ctxshard-qupload-")
    try:
        raw = os.path.join(tmp, "raw")
        subprocess.run([EXE, "synth", raw, "--utts", str(a.utts), "--dim", str(a.dim),
                        "--seed", "2", "--quiet"], check=True)
        for dt in DTYPES:
            subprocess.run([EXE, "pack", raw, os.path.join(tmp, dt), "--dtype", dt, "--quiet"],
                           check=True)
        budget = int(a.budget_mib * (1 << 20))
        res = {}
        for dt in DTYPES:
            p = os.path.join(tmp, dt)
            r, _ = epoch(p, "resident", None)
            po, pn = epoch(p, "pool", budget)
            st, sn = epoch(p, "stream", None)
            layout = po["reason"].split(";")[0]
            rows = int(layout.split(" segments of ")[1].split()[0])
            res[dt] = dict(res_dev=r["device_bytes"], res_up=r["uploaded_bytes"], rows=rows,
                           putts=po["pool_utterances"], pool_up=po["uploaded_bytes"],
                           batches=pn, st_up=st["uploaded_bytes"], st_batches=sn)
        with ctxshard.open(os.path.join(tmp, "f32")) as ds:
            U, F = ds.num_utterances, len(ds)
        print(f"{U} utterances, {F} frames x {a.dim} dims; k={a.context}, batch {a.batch}, "
              f"pool budget {a.budget_mib:g} MiB (4 segments)")
        f = res["f32"]
        print(f"{'':22s}" + "".join(f"{dt:>22s}" for dt in DTYPES))

        def row(name, key, per=None):
            cells = []
            for dt in DTYPES:
                v = res[dt][key] / (res[dt][per] if per else 1)
                ratio = v / (f[key] / (f[per] if per else 1))
                cells.append(f"{v:14.0f} ({ratio:5.3f}x)")
            print(f"{name:22s}" + "".join(f"{c:>22s}" for c in cells))
        row("resident device B", "res_dev")
        row("resident uploaded B", "res_up")
        row("pool rows/segment", "rows")
        row("pool utts/segment", "putts")
        row("pool uploaded B/batch", "pool_up", "batches")
        row("stream uploaded B/batch", "st_up", "st_batches")
        # what resident data takes is what it uploads (features, tables,
        # labels, headers); the batch ring beside it is the same for all
        for dt in DTYPES:
            print(f"utterances the float32 resident data's {f['res_up'] / (1 << 20):.1f} MiB "
                  f"hold as {dt}: {U * f['res_up'] / res[dt]['res_up']:.0f} "
                  f"({f['res_up'] / res[dt]['res_up']:.2f}x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


main()
