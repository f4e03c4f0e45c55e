"""`ctxshard import kaldi` of a CM-compressed archive at full size against
`cp` of the archive and the Python loops users write today, feeding
ctxshard.Writer: a pure-Python decoder (struct and Python floats, the
way kaldiio-style code reads an object, here with a 256-entry table per
column, the faster way to write it) and a numpy decoder
(tests/python/kaldi_ref.py, vectorised per column).

    ninja -C build && /usr/bin/python3 bench/kaldi_import.py [--utts 28539] [--dim 28]
                         [--repeats 3] [--py-utts 300] [--dir DIR] [--keep DIR]
                         [--only 'cp,cp + fsync,import q8']

Synthesises --utts utterances of LibriSpeech-like lengths (mean about
1,270 frames, 100..3,500) compressed as Kaldi's CompressedMatrix does
(kSpeechFeature: CM), 1.0 GB at the defaults (the size of
train-clean-100), written as one archive and a feats.scp (--keep DIR
keeps them there and reuses them on the next run), then times,
interleaved, with a warm page cache, each repeat running every
competitor once:

  cp                  cp of the archive (page cache to page cache, no fsync)
  cp + fsync          the same and `sync` of the copy (the archive made durable)
  import              ctxshard import kaldi, all CPUs (the output fsynced, as always)
  import --threads 1  one thread
  import f16          --dtype f16 (the output 2x the archive instead of 4x)
  import q8           --dtype q8 (format 1.4): the CM objects' own codes and
                      headers, transposed to rows, no second quantization
                      (the output about the archive's size)
  import zstd         --compress zstd (level 3, byte-shuffled)
  dataset cp -r+sync  a copy of the float32 dataset made durable: the floor of
                      writing the import's output, 4x the archive
  ... -> tmpfs        (--tmpfs DIR) cp and the imports into a tmpfs: no disk and
                      fsync free, the CPU's work alone

and once the numpy loop over the whole listing and the pure-Python loop
over its first --py-utts utterances (extrapolated to the archive by
bytes: it would take hours, and the figure says so).  The medians and the
ratios are printed: every competitor against `cp`, against `cp + fsync`,
and the Python loops against the import, with CPU seconds and the
import's peak memory.  The import's output is checked against the numpy
loop's (the same bytes) and for the same bytes at every thread count.
Targets (issue 29): at least 10x the Python loop, at most 2x `cp`; issue 47:
`import q8` at most 2x `cp + fsync` (the archive made durable: the import
fsyncs its output)."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SRC, "python"))
sys.path.insert(0, os.path.join(SRC, "tests", "python"))
os.environ.setdefault("CTXSHARD_LIB", os.path.join(SRC, "build", "lib", "libctxshard.so"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402
import kaldi_ref as K  # noqa: E402

EXE = os.path.join(SRC, "build", "tools", "ctxshard")
F = np.float32


def encode_cm(a):
    """K.encode(a, "CM"), with the per-column work done for all columns at
    once (the same functions, broadcast): the same bytes, checked below."""
    R, C = a.shape
    if R < 5:
        return K.encode(a, "CM")
    mn, rng = K.global_header(a)
    s = np.sort(a, axis=0)
    q = R // 4
    u = lambda x: K.float_to_u16(mn, rng, x)  # noqa: E731
    p0 = np.minimum(u(s[0]), 65532)
    p25 = np.minimum(np.maximum(u(s[q]), p0 + 1), 65533)
    p75 = np.minimum(np.maximum(u(s[3 * q]), p25 + 1), 65534)
    p100 = np.maximum(u(s[R - 1]), p75 + 1)
    heads = np.stack([p0, p25, p75, p100], axis=1).astype("<u2")
    pf = [K.u16_to_float(mn, rng, p) for p in (p0, p25, p75, p100)]
    b = K.float_to_char(*pf, a)
    import struct
    return (b"\0BCM " + struct.pack("<ffii", mn, rng, R, C) + heads.tobytes() +
            np.ascontiguousarray(b.T).tobytes())


def lengths(n, rng):
    t = rng.lognormal(np.log(1150), 0.45, n).astype(np.int64)
    return np.clip(t, 100, 3500)


def synth(d, n, dim):
    rng = np.random.default_rng(29)
    T = lengths(n, rng)
    ark, scp = os.path.join(d, "feats.ark"), os.path.join(d, "feats.scp")
    t0 = time.time()
    with open(ark, "wb") as f, open(scp, "w") as g:
        for i in range(n):
            a = (rng.standard_normal((T[i], dim)) * 4 + np.arange(dim) - dim / 2).astype(F)
            obj = encode_cm(a)
            if i < 16:
                assert obj == K.encode(a, "CM"), "the broadcast encoder differs from kaldi_ref"
            key = f"{1000 + i % 251}-{i // 251:04d}-{i:06d}"
            f.write(key.encode() + b" ")
            g.write(f"{key} {ark}:{f.tell()}\n")
            f.write(obj)
            if i % 2000 == 0:
                sys.stderr.write(f"\rsynth: {i}/{n}")
    sys.stderr.write(f"\rsynth: {n} utterances, {int(T.sum())} frames in {time.time() - t0:.0f} s\n")
    # ids in byte order already (the scp as Kaldi keeps it)
    lines = sorted(open(scp).read().splitlines())
    with open(scp, "w") as g:
        g.write("\n".join(lines) + "\n")
    return ark, scp, int(T.sum())


def numpy_loop(scp, out, limit=None):
    """What users write today: parse the scp, seek, decode in numpy, Writer.add."""
    files = {}
    n = 0
    with ctxshard.Writer(out) as w:
        for line in open(scp):
            key, rx = line.split(None, 1)
            path, off = rx.strip().rsplit(":", 1)
            f = files.get(path) or files.setdefault(path, open(path, "rb"))
            f.seek(int(off))
            head = f.read(21)
            R, C = np.frombuffer(head, "<i4", 2, 13)
            obj = head + f.read(8 * C + R * C)
            w.add(key, K.decode(obj)[1])
            n += len(obj)
            if limit and n >= limit:
                break
    for f in files.values():
        f.close()
    return n


def decode_cm_pure(obj):
    """A CM object decoded in pure Python, as kaldiio-style code does it:
    struct for the headers, Python floats for the arithmetic (Kaldi's
    formulas in double, so the last bit may differ from Kaldi's float
    expression), a 256-entry table per column.  A list of rows."""
    import struct
    mn, rng, R, C = struct.unpack_from("<ffii", obj, 5)
    heads = struct.unpack_from(f"<{4 * C}H", obj, 21)
    data = obj[21 + 8 * C:]
    inc = rng * 1.52590218966964e-05
    cols = []
    for c in range(C):
        p0, p25, p75, p100 = (mn + inc * h for h in heads[4 * c:4 * c + 4])
        t = [p0 + (p25 - p0) * v / 64.0 if v <= 64 else
             p25 + (p75 - p25) * (v - 64) / 128.0 if v <= 192 else
             p75 + (p100 - p75) * (v - 192) / 63.0 for v in range(256)]
        col = data[c * R:(c + 1) * R]
        cols.append([t[b] for b in col])
    return [list(r) for r in zip(*cols)]


def pure_loop(scp, out, limit):
    """The loop above with the pure-Python decoder, over the first
    `limit` utterances; the bytes of the objects it read."""
    n = 0
    files = {}
    with ctxshard.Writer(out) as w:
        for i, line in enumerate(open(scp)):
            if i >= limit:
                break
            key, rx = line.split(None, 1)
            path, off = rx.strip().rsplit(":", 1)
            f = files.get(path) or files.setdefault(path, open(path, "rb"))
            f.seek(int(off))
            head = f.read(21)
            import struct
            R, C = struct.unpack_from("<ii", head, 13)
            obj = head + f.read(8 * C + R * C)
            w.add(key, np.array(decode_cm_pure(obj), dtype=F))
            n += len(obj)
    for f in files.values():
        f.close()
    return n


def timed(cmd):
    """(wall seconds, CPU seconds, peak RSS in MB) of a command; the peak
    from /usr/bin/time, which forks from a small process (a child forked
    from this one counts this interpreter's pages until it execs)."""
    with tempfile.NamedTemporaryFile("r") as m:
        t0 = time.perf_counter()
        p = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", m.name, *cmd],
                             stdout=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        dt = time.perf_counter() - t0
        if status:
            raise SystemExit(f"{cmd}: exit status {status}")
        return dt, ru.ru_utime + ru.ru_stime, int(m.read().split()[-1]) / 1024


def same_files(a, b):
    fa, fb = sorted(os.listdir(a)), sorted(os.listdir(b))
    return fa == fb and all(open(os.path.join(a, f), "rb").read() == open(os.path.join(b, f), "rb").read()
                            for f in fa)


def du(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--utts", type=int, default=28539)
    ap.add_argument("--dim", type=int, default=28)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--py-utts", type=int, default=300,
                    help="utterances the pure-Python loop decodes (extrapolated by bytes)")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", default=None, help="keep (and reuse) the archive in this directory")
    ap.add_argument("--only", default=None,
                    help="comma-separated competitors to run (e.g. 'cp,cp + fsync,import q8'): "
                         "these alone, without the Python loops and their byte checks")
    ap.add_argument("--tmpfs", default=None,
                    help="also cp and import into this tmpfs directory (/dev/shm): no disk, "
                         "fsync free, what is left is the CPU's work")
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="ctxshard-kaldi-bench-", dir=a.dir)
    try:
        if a.keep:
            os.makedirs(a.keep, exist_ok=True)
            ark, scp = os.path.join(a.keep, "feats.ark"), os.path.join(a.keep, "feats.scp")
            tag = os.path.join(a.keep, f"made-{a.utts}-{a.dim}")
            if not os.path.exists(tag):
                ark, scp, _ = synth(a.keep, a.utts, a.dim)
                open(tag, "w").close()
        else:
            ark, scp, _ = synth(d, a.utts, a.dim)
        size = os.path.getsize(ark)
        subprocess.run(["cat", ark], check=True, stdout=subprocess.DEVNULL)  # warm
        out = os.path.join(d, "imp")
        dst = os.path.join(d, "copy.ark")
        imp = [EXE, "import", "kaldi", scp]
        runs = {
            "cp": lambda: timed(["cp", ark, dst]),
            "cp + fsync": lambda: timed(["sh", "-c", f"cp {ark} {dst} && sync {dst}"]),
            "import": lambda: timed(imp + [out, "--quiet"]),
            "import --threads 1": lambda: timed(imp + [out + "-t1", "--quiet", "--threads", "1"]),
            "import f16": lambda: timed(imp + [out + "-f16", "--quiet", "--dtype", "f16"]),
            "import q8": lambda: timed(imp + [out + "-q8", "--quiet", "--dtype", "q8"]),
            "import zstd": lambda: timed(imp + [out + "-z", "--quiet", "--compress", "zstd"]),
            "dataset cp -r+sync": lambda: timed(["sh", "-c", f"rm -rf {dst}.d && cp -r {out} "
                                                 f"{dst}.d && sync {dst}.d/*"]),
        }
        if a.tmpfs:
            shm = tempfile.mkdtemp(prefix="ctxshard-kaldi-bench-", dir=a.tmpfs)
            sdst, sout = os.path.join(shm, "copy.ark"), os.path.join(shm, "imp")

            def shm_run(cmd):
                shutil.rmtree(sout, ignore_errors=True)
                if os.path.exists(sdst):
                    os.remove(sdst)
                return timed(cmd)
            runs["cp -> tmpfs"] = lambda: shm_run(["cp", ark, sdst])
            runs["import -> tmpfs"] = lambda: shm_run(imp + [sout, "--quiet"])
            runs["import -t1 -> tmpfs"] = lambda: shm_run(imp + [sout, "--quiet", "--threads", "1"])
            runs["import f16 -> tmpfs"] = lambda: shm_run(imp + [sout, "--quiet", "--dtype", "f16"])
        if a.only:
            want = [k.strip() for k in a.only.split(",")]
            unknown = [k for k in want if k not in runs]
            if unknown:
                raise SystemExit(f"--only: no competitor named {', '.join(unknown)} "
                                 f"(there are: {', '.join(runs)})")
            runs = {k: runs[k] for k in want}
        res = {k: [] for k in runs}
        for r in range(a.repeats):
            for k, f in runs.items():
                if os.path.exists(dst):
                    os.remove(dst)
                res[k].append(f())
            sys.stderr.write(f"\rrepeat {r + 1}/{a.repeats}")
        sys.stderr.write("\n")
        if a.only:
            med = {k: statistics.median(x[0] for x in v) for k, v in res.items()}
            cpu = {k: statistics.median(x[1] for x in v) for k, v in res.items()}
            rss = {k: max(x[2] for x in v) for k, v in res.items()}
            print(f"archive: {a.utts} utterances x {a.dim} (CM), {size / 1e9:.2f} GB; "
                  f"{os.cpu_count()} CPUs; medians of {a.repeats}, interleaved; load average "
                  f"{os.getloadavg()[0]:.2f}")
            for k in runs:
                rel = "".join(f" {med[k] / med[b]:7.2f} x {b}" for b in ("cp", "cp + fsync") if b in med)
                print(f"  {k:24s} {med[k]:8.2f} s wall {cpu[k]:7.2f} s CPU {rss[k]:6.0f} MB peak{rel}")
            return
        same_threads = same_files(out, out + "-t1")
        t0 = time.perf_counter()
        c0 = time.process_time()
        numpy_loop(scp, os.path.join(d, "loop"))
        t_np, c_np = time.perf_counter() - t0, time.process_time() - c0
        same = same_files(out, os.path.join(d, "loop"))
        t0 = time.perf_counter()
        c0 = time.process_time()
        nb = pure_loop(scp, os.path.join(d, "pure"), a.py_utts)
        t_py = (time.perf_counter() - t0) * size / nb
        c_py = (time.process_time() - c0) * size / nb
        med = {k: statistics.median(x[0] for x in v) for k, v in res.items()}
        cpu = {k: statistics.median(x[1] for x in v) for k, v in res.items()}
        rss = {k: max(x[2] for x in v) for k, v in res.items()}
        print(f"archive: {a.utts} utterances x {a.dim} (CM), {size / 1e9:.2f} GB; datasets: "
              f"float32 {du(out) / 1e9:.2f} GB, float16 {du(out + '-f16') / 1e9:.2f} GB, "
              f"q8 {du(out + '-q8') / 1e9:.2f} GB, "
              f"zstd {du(out + '-z') / 1e9:.2f} GB; {os.cpu_count()} CPUs; medians of "
              f"{a.repeats}, interleaved")
        base, based = med["cp"], med["cp + fsync"]
        print(f"  {'':24s} {'wall s':>8s} {'CPU s':>7s} {'x cp':>7s} {'x cp+fsync':>11s} "
              f"{'peak MB':>8s}")
        for k in runs:
            print(f"  {k:24s} {med[k]:8.2f} {cpu[k]:7.2f} {med[k] / base:7.2f} "
                  f"{med[k] / based:11.2f} {rss[k]:8.0f}")
        m = med["import"]
        print(f"  {'numpy loop':24s} {t_np:8.2f} {c_np:7.2f} {t_np / base:7.2f} {t_np / based:11.2f}"
              f"    (the import is {t_np / m:.1f}x faster)")
        print(f"  {'pure-Python loop':24s} {t_py:8.0f} {c_py:7.0f} {t_py / base:7.0f} "
              f"{t_py / based:11.0f}    (the import is {t_py / m:.0f}x faster; measured on "
              f"{a.py_utts} utterances, {nb / 1e6:.1f} MB, extrapolated by bytes)")
        print(f"  import == numpy loop, byte for byte: {same}; --threads 1 == all CPUs: "
              f"{same_threads}")
        if a.tmpfs:
            shutil.rmtree(shm, ignore_errors=True)
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
