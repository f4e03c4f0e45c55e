"""`ctxshard import hdf5` and ctxshard.import_hdf5: files written by h5py
in both layouts (one dataset per utterance as Lhotse's NumpyHdf5Writer
writes them, in groups, float16/32/64, big-endian; the concatenated
features/offsets/ids) give the dataset ctxshard.Writer gives for the same
arrays, byte for byte; other files are refused naming the dataset.
Skipped without h5py or with a library built without HDF5.

usage: /usr/bin/python3 tests/python/hdf5_test.py BUILD_DIR SOURCE_ROOT"""
import os
import shutil
import sys
import tempfile
import unittest

from testenv import from_build, run, same_dataset

BUILD, SRC, EXE = from_build()

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402
from ctxshard import _native  # noqa: E402

try:
    import h5py
except ImportError:
    h5py = None

TMP = tempfile.mkdtemp(prefix="ctxshard-hdf5-")


def built_with_hdf5():
    d = tempfile.mkdtemp(dir=TMP)
    p = os.path.join(d, "x")
    open(p, "wb").close()
    try:
        ctxshard.import_hdf5(p, os.path.join(d, "o"))
    except ctxshard.CtxshardError as e:
        return e.code != _native.E_UNSUPPORTED
    return True


@unittest.skipIf(h5py is None, "h5py is not installed (Debian: python3-h5py)")
class Hdf5(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not built_with_hdf5():
            raise unittest.SkipTest("libctxshard was built without HDF5 (libhdf5-dev)")
        rng = np.random.default_rng(29)
        cls.utts = {}
        for i in range(9):
            x = rng.standard_normal((5 + 3 * i, 6))
            cls.utts[f"spk{i % 2}/utt{i}" if i < 4 else f"utt-{i}"] = x

    def setUp(self):
        self.d = tempfile.mkdtemp(dir=TMP)

    def path(self, name):
        return os.path.join(self.d, name)

    def writer_copy(self, name, utts, **opts):
        out = self.path(name)
        with ctxshard.Writer(out, **opts) as w:
            for k in sorted(utts, key=str.encode):
                w.add(k, utts[k])
        return out

    def test_per_utterance(self):
        dtypes = ["<f4", ">f4", "<f8", "<f2", ">f8"]
        utts = {}
        with h5py.File(self.path("feats.h5"), "w") as f:
            for j, (k, x) in enumerate(self.utts.items()):
                a = x.astype(dtypes[j % len(dtypes)])
                f.create_dataset(k, data=a)
                utts[k] = a
        out = self.path("out")
        r = run("import", "hdf5", self.path("feats.h5"), out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("imported 9 utterances", r.stdout)
        self.assertIsNone(same_dataset(out, self.writer_copy("wr", utts)))
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.ids[0], "spk0/utt0")
        opts = dict(dtype="bfloat16", compress="zstd", guard=4)
        info = ctxshard.import_hdf5(self.path("feats.h5"), self.path("py"), **opts)
        self.assertEqual(info["num_utterances"], 9)
        self.assertIsNone(same_dataset(self.path("py"), self.writer_copy("wr2", utts, **opts)))

    def test_concatenated(self):
        keys = sorted(self.utts, key=str.encode)
        feats = np.concatenate([self.utts[k] for k in keys]).astype(np.float32)
        offs = np.cumsum([0] + [len(self.utts[k]) for k in keys])
        with h5py.File(self.path("cat.h5"), "w") as f:
            f["features"] = feats
            f["offsets"] = offs
            f["ids"] = np.array([k.encode() for k in keys])
        out = self.path("out")
        r = run("import", "hdf5", self.path("cat.h5"), out)
        self.assertEqual(r.returncode, 0, r.stderr)
        want = {k: self.utts[k].astype(np.float32) for k in keys}
        self.assertIsNone(same_dataset(out, self.writer_copy("wr", want)))
        # variable-length str ids
        with h5py.File(self.path("cat2.h5"), "w") as f:
            f["features"] = feats
            f["offsets"] = offs.astype(np.int32)
            f.create_dataset("ids", data=keys, dtype=h5py.string_dtype())
        r = run("import", "hdf5", self.path("cat2.h5"), self.path("out2"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(same_dataset(out, self.path("out2")))

    def fails(self, h5, *want):
        out = self.path("bad-out")
        r = run("import", "hdf5", h5, out)
        self.assertEqual(r.returncode, 1, r.stderr + r.stdout)
        for w in want:
            self.assertIn(w, r.stderr)
        self.assertFalse(os.path.exists(out))

    def test_refusals(self):
        p = self.path("r.h5")
        with h5py.File(p, "w") as f:
            f["a"] = np.zeros((3, 4), np.float32)
            f["b"] = np.zeros((3, 4, 2), np.float32)
        self.fails(p, "r.h5: /b has 3 dimensions")
        with h5py.File(p, "w") as f:
            f["a"] = np.zeros((3, 4), np.int16)
        self.fails(p, "r.h5: /a holds integers", "labels are not imported from HDF5")
        with h5py.File(p, "w") as f:
            f["a"] = np.zeros((3, 4), np.float32)
            f["b"] = np.zeros((3, 5), np.float32)
        self.fails(p, "r.h5: ", "b: ")
        with h5py.File(p, "w") as f:
            f["a"] = np.full((3, 4), np.nan, np.float32)
        self.fails(p, "r.h5: a: ")
        with h5py.File(p, "w") as f:
            f["features"] = np.zeros((5, 2), np.float32)
            f["offsets"] = [0, 2, 4]
            f["ids"] = [b"a", b"b"]
        self.fails(p, "offsets run from 0 to 4, expected 0 to 5")
        with h5py.File(p, "w") as f:
            f["features"] = np.zeros((5, 2), np.float32)
            f["offsets"] = [0, 2, 5]
            f["ids"] = [b"b", b"a"]
        self.fails(p, "ids[1] 'a' comes after ids[0] 'b'")
        with h5py.File(p, "w") as f:
            f["features"] = np.zeros((5, 2), np.float32)
            f["offsets"] = [0, 2, 5]
            f["ids"] = [b"a", b"b"]
            f["lengths"] = [2, 3]
        self.fails(p, "also holds 'lengths'")
        with h5py.File(p, "w") as f:
            f.create_group("empty")
        self.fails(p, "r.h5: no datasets")
        with open(p, "wb") as f:
            f.write(b"not hdf5 at all")
        self.fails(p, "r.h5: not an HDF5 file")
        with self.assertRaises(ctxshard.CtxshardError) as e:
            ctxshard.import_hdf5(p, self.path("o"))
        self.assertIn("not an HDF5 file", str(e.exception))
        r = run("import", "hdf5", p, self.path("o"), "--ali", p)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
