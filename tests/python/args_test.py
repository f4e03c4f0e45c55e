"""Every public entry point of the ctxshard package, ctxshard.torch and
ctxshard.gpu with bad arguments, from one table: each refusal is the documented
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
import ctxshard.gpu as cxg  # noqa: E402
import ctxshard.utterances  # noqa: E402,F401
import ctxshard.torch as cxt  # noqa: E402
import torch  # noqa: E402

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
             ["pack", "nothing", "no such directory"]),
        ] + self.torch_table() + self.gpu_table() + self.utt_table()

    def torch_table(self):
        ds, test = self.ds, self.test
        p, tp = ds.path, test.path
        L = lambda **kw: cxt.Loader(p, **dict(dict(context=3, batch_size=16), **kw))  # noqa
        return [
            # Loader
            (lambda: L(context=3.7), TypeError, ["Loader", "context=3.7", "integer"]),
            (lambda: L(context=-1), ValueError, ["Loader", "context=-1", "0..1000000"]),
            (lambda: L(context="3"), TypeError, ["Loader", "context='3'"]),
            (lambda: L(batch_size=0), ValueError, ["Loader", "batch_size=0", "1.."]),
            (lambda: L(batch_size=64.0), TypeError, ["Loader", "batch_size=64.0"]),
            (lambda: L(rank=1), ValueError, ["Loader", "rank=1", "world_size"]),
            (lambda: L(rank=2, world_size=2), ValueError, ["Loader", "rank=2", "0..1"]),
            (lambda: L(rank=0, world_size=0), ValueError, ["Loader", "world_size=0"]),
            (lambda: L(rank=0.0, world_size=2), TypeError, ["Loader", "rank=0.0"]),
            (lambda: L(seed=-1), ValueError, ["Loader", "seed=-1"]),
            (lambda: L(seed=1.5), TypeError, ["Loader", "seed=1.5"]),
            (lambda: L(shuffle="yes"), ValueError, ["Loader", "shuffle='yes'", "block"]),
            (lambda: L(shuffle=1), TypeError, ["Loader", "shuffle=1", "True or False"]),
            (lambda: L(drop_last="no"), TypeError, ["Loader", "drop_last='no'"]),
            (lambda: L(weighted=1), TypeError, ["Loader", "weighted=1"]),
            (lambda: L(threads=0), ValueError, ["Loader", "threads=0"]),
            (lambda: L(threads=2.0), TypeError, ["Loader", "threads=2.0"]),
            (lambda: L(pin_memory=1), TypeError, ["Loader", "pin_memory=1"]),
            (lambda: L(device="gpu"), ValueError, ["Loader", "device='gpu'", "'cuda'"]),
            (lambda: L(device=1.0), TypeError, ["Loader", "device=1.0"]),
            (lambda: L(normalize="yes"), TypeError, ["Loader", "normalize='yes'", "Dataset"]),
            (lambda: L(normalize=(np.zeros(3), np.ones(3))), ValueError,
             ["Loader", "3 means", "dim 28", "dimension"]),
            (lambda: L(labels=1), TypeError, ["Loader", "labels=1"]),
            (lambda: cxt.Loader(tp, 3, 16, labels=True), ValueError,
             ["Loader", "labels=True", "no labels", "features only"]),
            (lambda: cxt.Loader(tp, 3, 16, weighted=True), ValueError,
             ["Loader", "weighted", "no labels"]),
            (lambda: L(num_samples=-1), ValueError, ["Loader", "num_samples=-1"]),
            (lambda: L(num_samples=100), ValueError, ["Loader", "num_samples=100",
                                                      "weighted"]),
            (lambda: L(gpu_mode="fast"), ValueError, ["Loader", "gpu_mode='fast'", "'pool'"]),
            (lambda: L(gpu_budget="lots"), ValueError, ["Loader", "gpu_budget", "not a size"]),
            (lambda: L(gpu_dtype=torch.float16), ValueError, ["Loader", "gpu_dtype",
                                                              "torch.bfloat16"]),
            (lambda: L(gpu_emulate="yes"), TypeError, ["Loader", "gpu_emulate='yes'"]),
            (lambda: L(prefetch=0), TypeError, ["Loader", "prefetch=0"]),
            (lambda: L(memory="1G"), ValueError, ["Loader", "memory", "block"]),
            (lambda: L(shuffle="block"), ValueError, ["Loader", "memory="]),
            (lambda: L(shuffle="block", memory="1G", blocks=0), ValueError,
             ["Loader", "blocks=0"]),
            (lambda: cxt.Loader(3, 3, 16), TypeError, ["Loader", "path=3"]),
            (lambda: L().set_epoch(-1), ValueError, ["set_epoch", "epoch=-1"]),
            (lambda: L().set_epoch(1.0), TypeError, ["set_epoch", "epoch=1.0"]),
            (lambda: L().load_state_dict([1]), TypeError, ["load_state_dict", "state_dict()"]),
            (lambda: L().load_state_dict({"seed": 0}), ValueError,
             ["load_state_dict", "lacks", "epoch"]),
            (lambda: L().load_state_dict(dict(L().state_dict(), epoch=-1)), ValueError,
             ["load_state_dict", "epoch", "-1"]),
            # FrameDataset
            (lambda: cxt.FrameDataset(p, 2.5), TypeError, ["FrameDataset", "context=2.5"]),
            (lambda: cxt.FrameDataset(p, -3), ValueError, ["FrameDataset", "context=-3"]),
            (lambda: cxt.FrameDataset(5, 3), TypeError, ["FrameDataset", "path=5"]),
            (lambda: cxt.FrameDataset(p, 3, normalize=1), TypeError,
             ["FrameDataset", "normalize=1"]),
            (lambda: cxt.FrameDataset(tp, 3, labels=True), ValueError,
             ["FrameDataset", "labels=True", "no labels"]),
            (lambda: cxt.FrameDataset(p, 3, labels="y"), TypeError,
             ["FrameDataset", "labels='y'"]),
            (lambda: cxt.FrameDataset(p, 3)[len(ds)], IndexError, ["gather", str(len(ds))]),
        ]

    def utt_table(self):
        ds, test = self.ds, self.test
        p, tp = ds.path, test.path
        U = lambda **kw: cxt.UtteranceLoader(p, **dict(dict(frame_budget=20000), **kw))  # noqa
        S = lambda **kw: cxt.UtteranceBatchSampler(p, **dict(dict(frame_budget=20000), **kw))  # noqa
        longest = max(ds.utterance_frames(u)[1] for u in range(ds.num_utterances))
        return [
            (lambda: U(frame_budget=0), ValueError, ["UtteranceLoader", "frame_budget=0"]),
            (lambda: U(frame_budget=2.5), TypeError, ["UtteranceLoader", "frame_budget=2.5"]),
            (lambda: cxt.UtteranceLoader(p), TypeError, ["frame_budget"]),
            (lambda: U(frame_budget=longest - 1), ValueError,
             ["UtteranceLoader: ", "longer than frame_budget", str(longest),
              'long_utterances="alone"']),
            (lambda: U(shuffle=1), TypeError, ["UtteranceLoader", "shuffle=1"]),
            (lambda: U(seed=-1), ValueError, ["UtteranceLoader", "seed=-1"]),
            (lambda: U(rank=1), ValueError, ["UtteranceLoader", "rank=1", "world_size"]),
            (lambda: U(rank=3, world_size=2), ValueError, ["UtteranceLoader", "rank=3", "0..1"]),
            (lambda: U(world_size=0), ValueError, ["UtteranceLoader", "world_size=0"]),
            (lambda: U(threads=0), ValueError, ["UtteranceLoader", "threads=0"]),
            (lambda: U(drop_last="no"), TypeError, ["UtteranceLoader", "drop_last='no'"]),
            (lambda: U(buckets=0), ValueError, ["UtteranceLoader", "buckets=0", "1..1024"]),
            (lambda: U(buckets=2000), ValueError, ["UtteranceLoader", "buckets=2000"]),
            (lambda: U(max_batch=0), ValueError, ["UtteranceLoader", "max_batch=0"]),
            (lambda: U(long_utterances="skip"), ValueError,
             ["UtteranceLoader", "long_utterances='skip'", "'alone'"]),
            (lambda: U(normalize="yes"), TypeError, ["UtteranceLoader", "normalize='yes'"]),
            (lambda: U(per_utterance=1), TypeError, ["UtteranceLoader", "per_utterance=1"]),
            (lambda: U(labels=1), TypeError, ["UtteranceLoader", "labels=1"]),
            (lambda: cxt.UtteranceLoader(tp, 20000, labels=True), ValueError,
             ["UtteranceLoader", "labels=True", "no labels"]),
            (lambda: U(targets="yes"), TypeError, ["UtteranceLoader", "targets='yes'"]),
            (lambda: U(targets=True), ValueError,
             ["UtteranceLoader", "targets=True", "no label sequences", "--transcripts"]),
            (lambda: U(memory="lots"), ValueError, ["UtteranceLoader", "memory", "not a size"]),
            (lambda: U(memory="1G", shuffle=False), ValueError,
             ["UtteranceLoader", "memory=", "shuffle=True"]),
            (lambda: U(blocks=4), ValueError, ["UtteranceLoader", "blocks=", "memory="]),
            (lambda: U(memory="1G", blocks=0), ValueError, ["UtteranceLoader", "blocks=0"]),
            (lambda: U(memory=1000), ValueError, ["UtteranceLoader: ", "memory budget",
                                                  "longest utterance"]),
            (lambda: U(device="gpu"), ValueError, ["UtteranceLoader", "device='gpu'"]),
            (lambda: U().set_epoch(-1), ValueError, ["set_epoch", "epoch=-1"]),
            (lambda: U().load_state_dict([1]), TypeError, ["load_state_dict", "state_dict()"]),
            (lambda: U().load_state_dict({"seed": 0}), ValueError,
             ["load_state_dict", "lacks", "epoch"]),
            (lambda: U().load_state_dict(dict(U().state_dict(), frame_budget=5)), ValueError,
             ["load_state_dict", "frame_budget", "order would differ"]),
            (lambda: S(frame_budget=-5), ValueError, ["UtteranceBatchSampler", "frame_budget=-5"]),
            (lambda: S().state_dict(position=-1), ValueError, ["state_dict", "position=-1"]),
            (lambda: cxt.UtteranceDataset(5), TypeError, ["UtteranceDataset", "path=5"]),
            (lambda: cxt.UtteranceDataset(p, per_utterance="y"), TypeError,
             ["UtteranceDataset", "per_utterance='y'"]),
            (lambda: cxt.UtteranceDataset(tp, labels=True), ValueError,
             ["UtteranceDataset", "labels=True", "no labels"]),
            (lambda: cxt.UtteranceDataset(p, targets=2), TypeError,
             ["UtteranceDataset", "targets=2"]),
            (lambda: cxt.UtteranceDataset(p)[len(ds.ids)], IndexError,
             ["UtteranceDataset", f"u={len(ds.ids)}"]),
            (lambda: ctxshard.utterances.pad_batch(ds, [99]), IndexError,
             ["pad_batch", "0..3"]),
            (lambda: ctxshard.utterances.pad_batch(ds, [0.5]), TypeError,
             ["pad_batch", "utterance numbers"]),
        ]

    def gpu_table(self):
        ds, test = self.ds, self.test
        s = ctxshard.Sampler(ds)
        G = lambda **kw: cxg.GpuLoader(**dict(dict(dataset=ds, sampler=s, context=3,  # noqa
                                                   batch_size=16, device=cxg.EMULATE), **kw))
        return [
            (lambda: cxg.probe(-5), ValueError, ["probe", "device=-5", "EMULATE"]),
            (lambda: cxg.probe("0"), TypeError, ["probe", "device='0'"]),
            (lambda: G(dataset=ds.path), TypeError, ["GpuLoader", "dataset", "ctxshard.open"]),
            (lambda: G(sampler=None), TypeError, ["GpuLoader", "sampler=None", "Sampler"]),
            (lambda: G(sampler=ctxshard.Sampler(test)), ValueError,
             ["GpuLoader", "sampler is over"]),
            (lambda: G(context=1.5), TypeError, ["GpuLoader", "context=1.5"]),
            (lambda: G(context=-1), ValueError, ["GpuLoader", "context=-1"]),
            (lambda: G(batch_size=0), ValueError, ["GpuLoader", "batch_size=0"]),
            (lambda: G(device=0.0), TypeError, ["GpuLoader", "device=0.0"]),
            (lambda: G(mode="fast"), ValueError, ["GpuLoader", "mode='fast'", "'resident'"]),
            (lambda: G(budget=-1), ValueError, ["GpuLoader", "budget=-1"]),
            (lambda: G(normalize="train"), TypeError, ["GpuLoader", "normalize='train'"]),
            (lambda: G(normalize=(np.zeros(5), np.ones(5))), ValueError,
             ["GpuLoader", "5 means", "dim 28"]),
            (lambda: G(labels=0), TypeError, ["GpuLoader", "labels=0"]),
            (lambda: cxg.GpuLoader(test, ctxshard.Sampler(test), 3, 16, device=cxg.EMULATE,
                                   labels=True), ValueError,
             ["GpuLoader", "labels=True", "no labels"]),
            (lambda: G(drop_last=None), TypeError, ["GpuLoader", "drop_last=None"]),
            (lambda: G(threads=0), ValueError, ["GpuLoader", "threads=0"]),
            (lambda: G(slots=2), ValueError, ["GpuLoader", "slots=2", "3..1024"]),
            (lambda: G(pool_segments=1), ValueError, ["GpuLoader", "pool_segments=1"]),
            (lambda: G(out_dtype="float16"), ValueError, ["GpuLoader", "out_dtype", "'bfloat16'"]),
            (lambda: G(register=1), TypeError, ["GpuLoader", "register=1"]),
            (lambda: G(gds="no"), TypeError, ["GpuLoader", "gds='no'"]),
            (lambda: G(epoch=-1), ValueError, ["GpuLoader", "epoch=-1"]),
            (lambda: G(start=len(s) + 1), ValueError, ["GpuLoader", f"start={len(s) + 1}"]),
            (lambda: G().reset(-1), ValueError, ["reset", "epoch=-1"]),
            (lambda: G().reset(0, 1.5), TypeError, ["reset", "start=1.5"]),
            (lambda: G().next("s"), TypeError, ["next", "stream='s'"]),
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
