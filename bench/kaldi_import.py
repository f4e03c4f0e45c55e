"""`ctxshard import kaldi` of a CM-compressed archive at full size against
`cp` of the archive and the Python loop users write today (a numpy decoder
of Kaldi's objects, here tests/python/kaldi_ref.py, feeding
ctxshard.Writer).

    ninja -C build && /usr/bin/python3 bench/kaldi_import.py [--utts 28539] [--dim 28]
                                                           [--repeats 3] [--dir DIR]

Synthesises --utts utterances of LibriSpeech-like lengths (the lengths of
`ctxshard synth`: mean about 1,270 frames, 100..3,500) compressed as Kaldi's
CompressedMatrix does (kSpeechFeature: CM), 1.0 GB at the defaults (the
size of train-clean-100), written as one archive and a feats.scp, then
times, interleaved, with a warm page cache: `cp` of the archive (the I/O
floor), the import with all CPUs and with --threads 1, and once the Python
loop, and `cp -r` + `sync` of the dataset made (the floor of writing the
output, which is 4x the archive: CM stores a byte a value, the dataset
four, fsynced).  The importer's output is checked against the loop's: the
same bytes.  Targets (issue 29): at least 10x the Python loop, at most 2x
`cp`."""
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


def python_loop(scp, out):
    """What users write today: parse the scp, seek, decode in numpy, Writer.add."""
    files = {}
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
    for f in files.values():
        f.close()


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--utts", type=int, default=28539)
    ap.add_argument("--dim", type=int, default=28)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    d = tempfile.mkdtemp(prefix="ctxshard-kaldi-bench-", dir=a.dir)
    try:
        ark, scp, frames = synth(d, a.utts, a.dim)
        size = os.path.getsize(ark)
        subprocess.run(["cat", ark], check=True, stdout=subprocess.DEVNULL)  # warm
        times = {"cp": [], "import": [], "import --threads 1": [], "cp -r dataset && sync": []}
        for _ in range(a.repeats):
            dst = os.path.join(d, "copy.ark")
            times["cp"].append(timed(["cp", ark, dst]))
            os.remove(dst)
            out = os.path.join(d, "imp")
            times["import"].append(timed([EXE, "import", "kaldi", scp, out, "--quiet"]))
            times["import --threads 1"].append(
                timed([EXE, "import", "kaldi", scp, out, "--quiet", "--threads", "1"]))
            # the floor of writing the output: the dataset is 4x the archive
            # (one byte a value in CM, four in float32) and fsynced
            times["cp -r dataset && sync"].append(
                timed(["sh", "-c", f"cp -r {out} {dst} && sync"]))
            shutil.rmtree(dst)
        t0 = time.perf_counter()
        python_loop(scp, os.path.join(d, "loop"))
        t_loop = time.perf_counter() - t0
        same = all(open(os.path.join(d, "imp", f), "rb").read() ==
                   open(os.path.join(d, "loop", f), "rb").read()
                   for f in sorted(os.listdir(os.path.join(d, "imp"))))
        print(f"archive: {a.utts} utterances, {frames} frames x {a.dim} (CM), "
              f"{size / 1e9:.2f} GB; dataset {sum(os.path.getsize(os.path.join(d, 'imp', f)) for f in os.listdir(os.path.join(d, 'imp'))) / 1e9:.2f} GB")
        base = statistics.median(times["cp"])
        for k, v in times.items():
            m = statistics.median(v)
            print(f"  {k:22s} {m:7.2f} s  {size / m / 1e6:7.0f} MB/s  {m / base:5.2f}x cp")
        m = statistics.median(times["import"])
        print(f"  {'python loop':22s} {t_loop:7.2f} s  {size / t_loop / 1e6:7.0f} MB/s  "
              f"{t_loop / base:5.2f}x cp  (import is {t_loop / m:.1f}x faster)")
        print(f"  import == python loop, byte for byte: {same}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
