"""ctxshard convert from a q8 or q16 dataset: into float32 the values of
an independent decoder written from Kaldi's source (kaldi_ref.py), which
are those the reader serves; into float16 those values rounded by §7.1;
q8 into q16 the reference's encoding of them; into its own type (zstd
added, then taken off) the same headers and codes, byte for byte, also
Kaldi's codes that a second quantisation would move.  Also float32 into float16,
which the writer refused before (stored values of another float type).

usage: /usr/bin/python3 tests/python/qconvert_test.py BUILD_DIR SOURCE_ROOT"""
import os
import shutil
import struct
import sys
import unittest

import numpy as np  # noqa: E402

import qwrite_test as Q  # noqa: E402  (argv, the paths, run, stored, ref)

import ctxshard  # noqa: E402
import kaldi_ref as K  # noqa: E402

D = 13


def reference(dtype, h, c):
    """The reference decoder's float32 [T, D] of one stored utterance."""
    mn, rng = struct.unpack_from("<ff", h)
    T = len(c)
    if dtype == "q16":
        obj = b"\0BCM2 " + struct.pack("<ffii", mn, rng, T, D) + c.astype("<u2").tobytes()
    else:
        heads = [struct.unpack_from("<HHHH", h, 8 + 8 * d) for d in range(D)]
        obj = K.cm_object(mn, rng, heads, [c[:, d].tobytes() for d in range(D)])
    return K.decode(obj)[1]


def values(path):
    with ctxshard.open(path) as ds:
        return [np.array(ds.utterance(u)[1]) for u in range(ds.num_utterances)]


def setUpModule():
    Q.setUpModule()
    for dt in ("q8", "q16", "f32"):
        p = Q.run("pack", Q.RAW, os.path.join(Q.TMP, dt), "--dtype", dt, "--quiet")
        assert p.returncode == 0, p.stderr


def tearDownModule():
    shutil.rmtree(Q.TMP)


def convert(src, name, *args):
    out = os.path.join(Q.TMP, name)
    p = Q.run("convert", os.path.join(Q.TMP, src), out, *args, "--quiet")
    assert p.returncode == 0, p.stderr
    v = Q.run("verify", out)
    assert v.returncode == 0, v.stdout + v.stderr
    return out


def same_files(a, b):
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        open(os.path.join(a, n), "rb").read() == open(os.path.join(b, n), "rb").read()
        for n in names)


class FromCoded(unittest.TestCase):
    def decoded(self, dt):
        """convert DT -> f32: the reference decoder's values, which are
        what the reader serves of DT."""
        out = convert(dt, f"{dt}-f32", "--dtype", "f32")
        got = values(out)
        utts, _ = Q.stored(os.path.join(Q.TMP, dt, Q.SHARD), dt, D)
        self.assertEqual(len(got), len(utts))
        served = values(os.path.join(Q.TMP, dt))
        for u, ((h, c), g, s) in enumerate(zip(utts, got, served)):
            self.assertTrue(np.array_equal(g.view(np.uint32), reference(dt, h, c).view(np.uint32)),
                            f"{dt} utterance {u}")
            self.assertTrue(np.array_equal(g.view(np.uint32), s.view(np.uint32)))
        return out, got

    def test_q8_f32(self):
        self.decoded("q8")

    def test_q16_f32(self):
        self.decoded("q16")

    def test_q8_f16_bf16(self):
        """f16: the decoded values rounded to nearest even; f16 and bf16
        what converting the float32 result gives, byte for byte."""
        f32, dec = self.decoded("q8")
        f16 = convert("q8", "q8-f16", "--dtype", "f16")
        for g, want in zip(values(f16), dec):
            self.assertTrue(np.array_equal(g, want.astype(np.float16).astype(np.float32)))
        for dt in ("f16", "bf16"):
            direct = convert("q8", f"q8-{dt}-direct", "--dtype", dt)
            via = Q.run("convert", f32, os.path.join(Q.TMP, f"q8-f32-{dt}"), "--dtype", dt,
                        "--quiet")
            self.assertEqual(via.returncode, 0, via.stderr)
            self.assertTrue(same_files(direct, os.path.join(Q.TMP, f"q8-f32-{dt}")), dt)

    def test_q8_q16(self):
        """q8 -> q16: the reference's CM2 encoding of the decoded values."""
        _, dec = self.decoded("q8")
        out = convert("q8", "q8-q16", "--dtype", "q16")
        got, _ = Q.stored(os.path.join(out, Q.SHARD), "q16", D)
        for u, ((h, c), m) in enumerate(zip(got, dec)):
            rh, rc = Q.ref(m, "q16")
            self.assertEqual(h, rh, f"utterance {u}")
            self.assertTrue((c == rc).all(), f"utterance {u}")

    def test_relayout_keeps_codes(self):
        """DT -> DT zstd -> DT plain: the packed files again, byte for byte,
        serving the same values."""
        for dt in ("q8", "q16"):
            z = convert(dt, f"{dt}-z", "--compress", "zstd")
            back = convert(f"{dt}-z", f"{dt}-z-plain", "--no-compress")
            self.assertTrue(same_files(back, os.path.join(Q.TMP, dt)), dt)
            for a, b in zip(values(z), values(os.path.join(Q.TMP, dt))):
                self.assertTrue(np.array_equal(a.view(np.uint32), b.view(np.uint32)), dt)

    def test_relayout_kept_kaldi_codes(self):
        """Kaldi CM objects whose percentiles are not the encoder's (codes
        kept by import): convert q8 -> q8 zstd -> q8 plain gives the import's
        files again, where encoding the decoded values moves them."""
        rng = np.random.default_rng(4)
        objs = []
        for i in range(5):
            T = int(rng.integers(2, 50))
            heads = [tuple(sorted(int(x) for x in rng.integers(0, 65536, 4))) for _ in range(D)]
            objs.append((f"utt{i}", K.cm_object(-3.0, 6.0, heads,
                                                [rng.integers(0, 256, T, np.uint8) for _ in range(D)])))
        ark = os.path.join(Q.TMP, "hand.ark")
        K.write_ark(ark, objs)
        p = Q.run("import", "kaldi", ark, os.path.join(Q.TMP, "hand"), "--dtype", "q8", "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        convert("hand", "hand-z", "--compress", "zstd")
        back = convert("hand-z", "hand-z-plain", "--no-compress")
        self.assertTrue(same_files(back, os.path.join(Q.TMP, "hand")))
        utts, _ = Q.stored(os.path.join(back, Q.SHARD), "q8", D)
        for (h, c), (_, obj) in zip(utts, objs):
            self.assertEqual(h, obj[5:13] + obj[21:21 + 8 * D])
            again = Q.ref(reference("q8", h, c), "q8")
            self.assertTrue(h != again[0] or not (c == again[1]).all())


class FloatToFloat(unittest.TestCase):
    def test_f32_f16(self):
        """float32 -> float16: the stored values rounded to nearest even
        (refused before: "stored features must be the dataset's dtype")."""
        out = convert("f32", "f32-f16", "--dtype", "f16")
        for g, want in zip(values(out), values(os.path.join(Q.TMP, "f32"))):
            self.assertTrue(np.array_equal(g, want.astype(np.float16).astype(np.float32)))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
