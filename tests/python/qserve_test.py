"""Reading q8 and q16 datasets (format 1.4) from Python: dtype names them,
utterance() gives the decoded float32 values (a fresh read-only array:
those gather() serves for the same frames, and within the quantisation
step of the raw features), window() refuses (codes are not values).

usage: /usr/bin/python3 tests/python/qserve_test.py BUILD_DIR SOURCE_ROOT"""
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-qserve-")
RAW = os.path.join(TMP, "raw")


def setUpModule():
    subprocess.run([EXE, "synth", RAW, "--utts", "12", "--seed", "3", "--quiet"], check=True)
    for dt in ("q8", "q16"):
        subprocess.run([EXE, "pack", RAW, os.path.join(TMP, dt), "--dtype", dt, "--quiet"],
                       check=True)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


class CodedReads(unittest.TestCase):
    def check(self, dt, step):
        with ctxshard.open(os.path.join(TMP, dt)) as ds:
            self.assertEqual(ds.dtype, dt)
            with self.assertRaisesRegex(ValueError, "codes"):
                ds.window(0, 0)
            raw = {os.path.basename(p)[:-4]: np.load(p)
                   for p in glob.glob(os.path.join(RAW, "mfcc", "*.npy"))}
            for u in range(ds.num_utterances):
                uid, x, _ = ds.utterance(u)
                self.assertEqual(x.dtype, np.float32)
                self.assertFalse(x.flags.writeable)
                frames = np.arange(len(x), dtype=np.uint64) + sum(
                    len(ds.utterance(v)[1]) for v in range(u))
                g = ds.gather(frames, 0)
                self.assertTrue(np.array_equal(g.reshape(x.shape).view(np.uint32),
                                               x.view(np.uint32)), f"{dt} {uid}")
                r = raw[uid].astype(np.float32)
                span = float(r.max() - r.min())
                self.assertLess(float(np.abs(x - r).max()), step * span, f"{dt} {uid}")

    def test_q8(self):
        self.check("q8", 0.03)

    def test_q16(self):
        self.check("q16", 1e-4)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]], verbosity=1)
