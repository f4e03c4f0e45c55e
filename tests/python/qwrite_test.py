"""Writing q8 and q16 datasets (format 1.4): pack, import kaldi and convert
store, for every utterance, the header and codes that an independent
encoder written from Kaldi's source (kaldi_ref.py) gives for its values
(normalised first with --normalize utterance), in QHEADERS and row-major
FEATURES, guard 0, minor version 4; zstd chunks on top verify; a Kaldi CM
archive imported into q8 keeps its codes (CM2 and FM objects are encoded
again, and said to be); verify refuses a bad header naming the utterance.

usage: /usr/bin/python3 tests/python/qwrite_test.py BUILD_DIR SOURCE_ROOT"""
import ctypes
import glob
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "python"))
sys.path.insert(0, os.path.join(SRC, "tests", "golden"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402
import kaldi_ref as K  # noqa: E402
from make_golden import rehash, sections  # noqa: E402  (a file's bytes and its section table)

TMP = tempfile.mkdtemp(prefix="ctxshard-qwrite-")
RAW = os.path.join(TMP, "raw")
SHARD = "shard-000000.cxs"
SEC_INDEX, SEC_FEATURES, SEC_QHEADERS = 2, 4, 10
F = np.float32

_XXH = ctypes.CDLL("libxxhash.so.0")
_XXH.XXH3_64bits.restype = ctypes.c_uint64
_XXH.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def run(*args):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True)


def stored(path, dtype, D):
    """[(header, codes [T, D])] of every utterance of a shard, and its
    minor version and guard."""
    data, s = sections(path)
    minor, = struct.unpack_from("<H", data, 10)
    off, ln, _ = s[SEC_INDEX]
    cum = np.frombuffer(data, "<u8", ln // 8, off)
    H = 8 + 8 * D if dtype == "q8" else 8
    qo, ql, _ = s[SEC_QHEADERS]
    assert ql == H * (len(cum) - 1), (ql, H, len(cum))
    fo, fl, _ = s[SEC_FEATURES]
    E = 1 if dtype == "q8" else 2
    assert fl == int(cum[-1]) * D * E  # no guard rows
    codes = np.frombuffer(data, np.uint8 if E == 1 else "<u2", int(cum[-1]) * D, fo).reshape(-1, D)
    return [(data[qo + u * H:qo + (u + 1) * H], codes[cum[u]:cum[u + 1]])
            for u in range(len(cum) - 1)], minor


def ref(m, dtype):
    """The reference's header and row-major codes of matrix m."""
    R, C = m.shape
    obj = K.encode(m, "CM" if dtype == "q8" else "CM2")
    body = obj[obj.index(b" ", 2) + 1:]
    if dtype == "q16":
        return body[:8], np.frombuffer(body, "<u2", R * C, 16).reshape(R, C)
    return (body[:8] + body[16:16 + 8 * C],
            np.frombuffer(body, np.uint8, R * C, 16 + 8 * C).reshape(C, R).T)


def raw_utts():
    return [np.load(p).astype(F) for p in sorted(glob.glob(os.path.join(RAW, "mfcc", "*.npy")))]


def normalised(m):
    """§7.2 in float64, rounded once to float32."""
    x = m.astype(np.float64)
    mean = x.sum(0) / len(x)
    var = (x * x).sum(0) / len(x) - mean * mean
    sd = np.where(var > 0, np.sqrt(np.maximum(var, 0)), 0)
    return ((x - mean) * np.where(sd > 0, 1.0 / np.where(sd > 0, sd, 1), 1.0)).astype(F)


def setUpModule():
    assert run("synth", RAW, "--utts", 12, "--seed", 5, "--dim", 13, "--quiet").returncode == 0


def tearDownModule():
    shutil.rmtree(TMP)


class Pack(unittest.TestCase):
    def check(self, dtype, extra=(), norm=False):
        out = os.path.join(TMP, f"{dtype}{len(extra)}")
        p = run("pack", RAW, out, "--dtype", dtype, "--quiet", *extra)
        self.assertEqual(p.returncode, 0, p.stderr)
        got, minor = stored(os.path.join(out, SHARD), dtype, 13)
        self.assertEqual(minor, 4)
        want = [ref(normalised(m) if norm else m, dtype) for m in raw_utts()]
        self.assertEqual(len(got), len(want))
        for u, ((h, c), (rh, rc)) in enumerate(zip(got, want)):
            self.assertEqual(h, rh, f"{dtype} utterance {u}: header")
            self.assertTrue((c == rc).all(), f"{dtype} utterance {u}: codes")
        v = run("verify", out)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        return out

    def test_q8(self):
        out = self.check("q8")
        info = run("info", out).stdout
        self.assertIn("13 x q8: 1 byte a value and a header of 112 bytes an utterance", info)
        self.assertIn("format        1.4", info)

    def test_q16(self):
        self.check("q16", ("--block-sums", "off"))

    def test_normalize(self):
        self.check("q8", ("--normalize", "utterance"), norm=True)

    def test_guard_said(self):
        out = os.path.join(TMP, "guard")
        p = run("pack", RAW, out, "--dtype", "q8", "--guard", "4", "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--guard 4: a q8 dataset stores no guard rows", p.stderr)

    def test_zstd_and_convert(self):
        """zstd chunks of codes verify; convert f32 -> q8 gives pack's bytes."""
        z = os.path.join(TMP, "q8z")
        p = run("pack", RAW, z, "--dtype", "q8", "--compress", "zstd", "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(run("verify", z).returncode, 0)
        f32 = os.path.join(TMP, "f32")
        q8 = os.path.join(TMP, "q8-packed")
        self.assertEqual(run("pack", RAW, f32, "--quiet").returncode, 0)
        self.assertEqual(run("pack", RAW, q8, "--dtype", "q8", "--quiet").returncode, 0)
        c = os.path.join(TMP, "q8-converted")
        p = run("convert", f32, c, "--dtype", "q8", "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        for name in (SHARD, "manifest.cxs"):
            self.assertEqual(open(os.path.join(c, name), "rb").read(),
                             open(os.path.join(q8, name), "rb").read(), name)

    def test_merge(self):
        """Two q8 parts merge into the whole pack's bytes; a q8 part and a
        float32 part do not merge."""
        parts = []
        for i, dt in ((1, "q8"), (2, "q8"), (2, "f32")):
            p = os.path.join(TMP, f"part{i}-{dt}")
            r = run("pack", RAW, p, "--dtype", dt, "--part", f"{i}/2", "--shard-size", "64K",
                    "--quiet")
            self.assertEqual(r.returncode, 0, r.stderr)
            parts.append(p)
        whole, merged = os.path.join(TMP, "whole-q8"), os.path.join(TMP, "merged-q8")
        self.assertEqual(run("pack", RAW, whole, "--dtype", "q8", "--shard-size", "64K",
                             "--quiet").returncode, 0)
        r = run("merge", parts[0], parts[1], merged, "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        names = sorted(os.listdir(whole))
        self.assertGreater(len(names), 2)
        self.assertEqual(names, sorted(os.listdir(merged)))
        for n in names:
            self.assertEqual(open(os.path.join(whole, n), "rb").read(),
                             open(os.path.join(merged, n), "rb").read(), n)
        r = run("merge", parts[0], parts[2], os.path.join(TMP, "mixed"), "--quiet")
        self.assertNotEqual(r.returncode, 0)

    def test_bad_header(self):
        """A header the encoder cannot write (range -1), its checksums made
        to agree: verify names the utterance; open serves it."""
        out = os.path.join(TMP, "bad")
        self.assertEqual(run("pack", RAW, out, "--dtype", "q8", "--block-sums", "off",
                             "--quiet").returncode, 0)
        path = os.path.join(out, SHARD)
        data, s = sections(path)
        data = bytearray(data)
        qo, ql, entry = s[SEC_QHEADERS]
        H = 8 + 8 * 13
        struct.pack_into("<f", data, qo + 3 * H + 4, -1.0)
        struct.pack_into("<Q", data, entry + 24, _XXH.XXH3_64bits(bytes(data[qo:qo + ql]), ql))
        n = struct.unpack_from("<I", data, 24)[0]
        struct.pack_into("<Q", data, 56, 0)
        struct.pack_into("<Q", data, 56, _XXH.XXH3_64bits(bytes(data[:64 + 32 * n]), 64 + 32 * n))
        alone = os.path.join(TMP, "alone.cxs")
        open(alone, "wb").write(data)
        v = run("verify", alone)
        self.assertNotEqual(v.returncode, 0)
        self.assertIn("QHEADERS: utterance 3", v.stderr + v.stdout)
        self.assertIn("range -1 is not finite and > 0", v.stderr + v.stdout)


class Sizes(unittest.TestCase):
    def test_one_byte_frames(self):
        """q8 with D = 1 takes one FEATURES byte a frame: one utterance of
        100,000 frames packs into a 122,880-byte shard, which open (info),
        verify and a read of every frame accept (spec 8, counts against
        sizes: the bound was 2 bytes a frame, and refused it)."""
        raw = os.path.join(TMP, "raw-d1")
        os.makedirs(os.path.join(raw, "mfcc"))
        m = np.sin(np.arange(100000, dtype=np.float64) / 7).astype(F).reshape(-1, 1)
        np.save(os.path.join(raw, "mfcc", "u1.npy"), m)
        for extra in (("--block-sums", "off"), ()):
            out = os.path.join(TMP, f"d1-{len(extra)}")
            p = run("pack", raw, out, "--dtype", "q8", "--quiet", *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            if extra:
                self.assertEqual(os.path.getsize(os.path.join(out, SHARD)), 122880)
            for args in (("info", out), ("verify", out), ("verify", os.path.join(out, SHARD)),
                         ("stats", out, "--json")):
                p = run(*args)
                self.assertEqual(p.returncode, 0, f"{args}: {p.stderr}")
            x = os.path.join(TMP, "d1.npy")
            p = run("gather", out, "--context", 0, "--all", "--out", x)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(np.load(x).reshape(-1).tobytes(),
                             K.decode(K.encode(m, "CM"))[1].reshape(-1).tobytes())

    def test_any_minor(self):
        """A coded dataset whose files say minor 3 (manifest) and 0 (shard)
        is read as 1.4 through its manifest and shard by shard alike (spec
        4.9: the dtype says the features are coded, as 1.1 to 1.3's
        sections do; the manifest's minor was refused, a shard's not)."""
        out = os.path.join(TMP, "minor")
        self.assertEqual(run("pack", RAW, out, "--dtype", "q8", "--quiet").returncode, 0)
        want = os.path.join(TMP, "minor-want.npy")
        self.assertEqual(run("gather", out, "--context", 0, "--all", "--out", want).returncode, 0)
        for name, minor in (("manifest.cxs", 3), (SHARD, 0)):
            data = bytearray(open(os.path.join(out, name), "rb").read())
            struct.pack_into("<H", data, 10, minor)
            open(os.path.join(out, name), "wb").write(bytes(data))
        rehash(out)
        for args in (("verify", out), ("verify", os.path.join(out, SHARD))):
            p = run(*args)
            self.assertEqual(p.returncode, 0, f"{args}: {p.stderr}")
        self.assertIn("format        1.3", run("info", out).stdout)
        got = os.path.join(TMP, "minor-got.npy")
        self.assertEqual(run("gather", out, "--context", 0, "--all", "--out", got).returncode, 0)
        self.assertEqual(open(got, "rb").read(), open(want, "rb").read())


class PythonWriter(unittest.TestCase):
    def test_writer_q8_is_pack(self):
        """ctxshard.Writer(dtype="q8") writes pack's bytes; import_kaldi
        reports the codes it kept."""
        ids = sorted(os.path.basename(p)[:-4] for p in glob.glob(os.path.join(RAW, "mfcc", "*.npy")))
        out = os.path.join(TMP, "pyq8")
        with ctxshard.Writer(out, dtype="q8", guard=0) as w:
            for i, m in zip(ids, raw_utts()):
                w.add(i, m)
        packed = os.path.join(TMP, "pyq8-packed")
        self.assertEqual(run("pack", RAW, packed, "--dtype", "q8", "--quiet").returncode, 0)
        a = stored(os.path.join(out, SHARD), "q8", 13)[0]
        b = stored(os.path.join(packed, SHARD), "q8", 13)[0]
        self.assertEqual([(h, c.tobytes()) for h, c in a], [(h, c.tobytes()) for h, c in b])
        ark = os.path.join(TMP, "py.ark")
        K.write_ark(ark, [("u1", K.encode(raw_utts()[0], "CM"))])
        res = ctxshard.import_kaldi(ark, os.path.join(TMP, "pykq8"), dtype="q8")
        self.assertEqual((res["codes_kept"], res["reencoded"]), (1, 0))


class Kaldi(unittest.TestCase):
    def test_cm_keeps_codes(self):
        rng = np.random.default_rng(9)
        ms = [rng.standard_normal((int(rng.integers(3, 60)), 11)).astype(F) * F(4) for _ in range(6)]
        kinds = ["CM", "CM", "CM2", "CM", "FM", "CM"]
        ark = os.path.join(TMP, "feats.ark")
        K.write_ark(ark, [(f"utt{i}", K.encode(m, k)) for i, (m, k) in enumerate(zip(ms, kinds))])
        out = os.path.join(TMP, "kq8")
        p = run("import", "kaldi", ark, out, "--dtype", "q8")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("kept the codes of 4 Kaldi CM objects", p.stdout)
        self.assertIn("2 utterances of other Kaldi kinds than CM encoded as q8", p.stderr)
        got, minor = stored(os.path.join(out, SHARD), "q8", 11)
        for i, (m, k) in enumerate(zip(ms, kinds)):
            h, c = got[i]
            if k == "CM":
                obj = K.encode(m, "CM")
                R, C = m.shape
                body = obj[5:]
                self.assertEqual(h, body[:8] + body[16:16 + 8 * C])
                self.assertTrue((c == np.frombuffer(body, np.uint8, R * C, 16 + 8 * C)
                                 .reshape(C, R).T).all())
            else:
                _, dec = K.decode(K.encode(m, k))
                rh, rc = ref(dec, "q8")
                self.assertEqual(h, rh)
                self.assertTrue((c == rc).all())
        self.assertEqual(run("verify", out).returncode, 0)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=1)
