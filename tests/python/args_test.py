"""Every public entry point of the ctxshard package (not ctxshard.torch)
with bad arguments, from one table: each refusal is the documented
exception (TypeError for a wrong kind, ValueError for a wrong value,
IndexError for a frame or utterance out of range), raised where the
argument is given, and its message names the function, the argument and
what is allowed.  Nothing is truncated, wrapped or compared silently.

usage: /usr/bin/python3 tests/python/args_test.py BUILD_DIR SOURCE_ROOT"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-args-")


def setUpModule():
    raw = os.path.join(TMP, "raw")
    subprocess.run([EXE, "synth", raw, "--utts", "4", "--seed", "2", "--quiet"], check=True)
    subprocess.run([EXE, "pack", raw, os.path.join(TMP, "ds"), "--guard", "8", "--quiet"],
                   check=True)
    subprocess.run([EXE, "synth", os.path.join(TMP, "testraw"), "--utts", "2",
                    "--no-transcripts", "--quiet"], check=True)
    subprocess.run([EXE, "pack", os.path.join(TMP, "testraw"), os.path.join(TMP, "test"),
                    "--quiet"], check=True)


def tearDownModule():
    shutil.rmtree(TMP)


class BadArguments(unittest.TestCase):
    def setUp(self):
        self.ds = ctxshard.open(os.path.join(TMP, "ds"))
        self.test = ctxshard.open(os.path.join(TMP, "test"))
        self.n = len(self.ds)

    def tearDown(self):
        self.ds.close()
        self.test.close()

    def table(self):
        ds, n, test = self.ds, self.n, self.test
        w_out = os.path.join(TMP, "w")
        # (call, exception, words the message must hold)
        return [
            # open
            (lambda: ctxshard.open(3), TypeError, ["open", "path"]),
            (lambda: ctxshard.open(""), ValueError, ["path", "empty"]),
            (lambda: ctxshard.open(os.path.join(TMP, "raw")), ValueError, ["raw", "pack"]),
            (lambda: ctxshard.open(os.path.join(TMP, "nothing")), OSError, ["nothing"]),
            # window
            (lambda: ds.window(-1, 3), IndexError, ["window", "i=-1", f"0..{n - 1}"]),
            (lambda: ds.window(n, 3), IndexError, ["window", f"i={n}"]),
            (lambda: ds.window(1.5, 3), TypeError, ["window", "i=1.5", "integer"]),
            (lambda: ds.window(10, "3"), TypeError, ["window", "k='3'", "integer"]),
            (lambda: ds.window(10, -1), ValueError, ["window", "k=-1"]),
            (lambda: ds.window(True, 3), TypeError, ["window", "i=True"]),
            (lambda: ds.window(10, 9), ValueError, ["window", "guard", "gather"]),
            # gather
            (lambda: ds.gather([-1], 3), IndexError, ["gather", "-1"]),
            (lambda: ds.gather([n], 3), IndexError, ["gather", str(n)]),
            (lambda: ds.gather([1.5], 3), TypeError, ["gather", "float64", "integers"]),
            (lambda: ds.gather(5, 3), TypeError, ["gather", "frames=5", "sequence"]),
            (lambda: ds.gather("12", 3), TypeError, ["gather", "frames='12'"]),
            (lambda: ds.gather([1], -2), ValueError, ["gather", "k=-2"]),
            (lambda: ds.gather([1], 3.0), TypeError, ["gather", "k=3.0"]),
            (lambda: ds.gather([1], 3, labels=1), TypeError, ["gather", "labels=1", "True"]),
            (lambda: ds.gather([1], 3, threads=0), ValueError, ["gather", "threads=0"]),
            (lambda: ds.gather([1], 3, out=np.zeros((1, 5), np.float32)), ValueError,
             ["gather", "out"]),
            (lambda: test.gather([1], 3, labels=True), ValueError,
             ["labels", "features only", "labels=False"]),
            # single frames and utterances
            (lambda: ds.label(-1), IndexError, ["label", "i=-1"]),
            (lambda: ds.label("3"), TypeError, ["label", "i='3'"]),
            (lambda: ds.locate(n), IndexError, ["locate", str(n)]),
            (lambda: ds.utterance(-1), IndexError, ["utterance", "-1", "0..3"]),
            (lambda: ds.utterance(4), IndexError, ["utterance", "4", "0..3"]),
            (lambda: ds.utterance(0.0), TypeError, ["utterance", "0.0"]),
            (lambda: ds.shard_labels(1), IndexError, ["shard_labels", "s=1"]),
            (lambda: ds.input_size(-1), ValueError, ["input_size", "-1"]),
            (lambda: ds.input_size(2.5), TypeError, ["input_size", "2.5"]),
            (lambda: test.labels, ValueError, ["features-only", "no labels"]),
            # Sampler
            (lambda: ctxshard.Sampler(ds, rank=1), ValueError, ["Sampler", "rank=1",
                                                                 "world_size"]),
            (lambda: ctxshard.Sampler(ds, world_size=0), ValueError, ["Sampler",
                                                                       "world_size=0"]),
            (lambda: ctxshard.Sampler(ds, seed=-1), ValueError, ["Sampler", "seed=-1"]),
            (lambda: ctxshard.Sampler(ds, seed=1.0), TypeError, ["Sampler", "seed=1.0"]),
            (lambda: ctxshard.Sampler(ds, kind=7), ValueError, ["Sampler", "kind=7"]),
            (lambda: ctxshard.Sampler(ds, drop_last=1), TypeError, ["Sampler", "drop_last=1"]),
            (lambda: ctxshard.Sampler(test, kind=ctxshard.WEIGHTED), ValueError,
             ["labels", "weighted"]),
            (lambda: ctxshard.Sampler(ds).get(-1), ValueError, ["get", "epoch=-1"]),
            (lambda: ctxshard.Sampler(ds).get(0, 1.5), TypeError, ["get", "pos=1.5"]),
            # Writer and pack
            (lambda: ctxshard.Writer(w_out, guard=-1), ValueError, ["Writer", "guard=-1"]),
            (lambda: ctxshard.Writer(w_out, guard="8"), TypeError, ["Writer", "guard='8'"]),
            (lambda: ctxshard.Writer(w_out, dtype="int8"), ValueError, ["Writer", "dtype",
                                                                        "float16"]),
            (lambda: ctxshard.Writer(w_out, shard_size="1.5Q"), ValueError,
             ["Writer", "shard_size", "not a size"]),
            (lambda: ctxshard.Writer(w_out, shard_size="1.5"), ValueError,
             ["Writer", "shard_size", "not a size"]),
            (lambda: ctxshard.Writer(w_out, shuffle=0), TypeError, ["Writer", "shuffle=0"]),
            (lambda: ctxshard.Writer(w_out, on_error="ignore"), ValueError,
             ["Writer", "on_error", "'raise'", "'skip'"]),
            (lambda: ctxshard.Writer(w_out, threads=0), ValueError, ["Writer", "threads=0"]),
            (lambda: ctxshard.Writer(7), TypeError, ["Writer", "out"]),
            (lambda: ctxshard.pack(os.path.join(TMP, "raw"), w_out, on_error="ignore"),
             ValueError, ["pack", "on_error", "'fail'"]),
            (lambda: ctxshard.pack(os.path.join(TMP, "nothing"), w_out), FileNotFoundError,
             ["pack", "nothing", "not a directory"]),
        ]

    def test_every_refusal(self):
        for n, (call, exc, words) in enumerate(self.table()):
            with self.subTest(case=n, words=words):
                with self.assertRaises(Exception) as cm:
                    call()
                e = cm.exception
                self.assertIsInstance(e, exc, f"{type(e).__name__}: {e}")
                for word in words:
                    self.assertIn(word.lower(), str(e).lower(), f"{type(e).__name__}: {e}")
        self.assertFalse(os.path.exists(os.path.join(TMP, "w")))

    def test_accepted_forms(self):
        """What the rules accept: numpy integers, uint64 arrays, lists."""
        ds = self.ds
        a = ds.window(np.int64(10), np.uint8(3))
        b = ds.window(10, 3)
        np.testing.assert_array_equal(a, b)
        x1 = ds.gather(np.array([1, 2], np.uint64), 3)
        x2 = ds.gather([1, 2], np.int32(3))
        np.testing.assert_array_equal(x1, x2)
        self.assertEqual(ds.utterance(np.int16(1))[0], ds.ids[1])
        # sizes: with units, fractions of a unit (rounded down), KiB/KB forms
        out = os.path.join(TMP, "sized")
        for text, want in (("1.5M", 3 << 19), ("64KiB", 64 << 10), ("0.3M", 314572),
                           (70000, 70000)):
            with ctxshard.Writer(out, shard_size=text) as w:
                w.add("a", np.ones((2, 3), np.float32))
            with ctxshard.open(out) as d:
                self.assertEqual(d.info["shard_size"], want, text)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
