"""The GPU loaders over q8 and q16 datasets (format 1.4), in host emulation:
Loader in stream and resident mode serves the CPU Loader's tensors bit for
bit, batch for batch; in pool mode (its block order) the same windows and
labels, each once; UtteranceLoader on the device the CPU path's batches;
and a damaged header is refused by each, naming the utterance.

usage: /usr/bin/python3 tests/python/qgpu_test.py BUILD_DIR SOURCE_ROOT"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
GOLDEN = os.path.join(SRC, "tests", "golden", "invalid")
sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.torch as cxt  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-qgpu-")
RAW = os.path.join(TMP, "raw")
BYTES = {"q8": 1, "q16": 2}


def setUpModule():
    subprocess.run([EXE, "synth", RAW, "--utts", "14", "--seed", "4", "--quiet"], check=True)
    for dt in BYTES:
        subprocess.run([EXE, "pack", RAW, os.path.join(TMP, dt), "--dtype", dt,
                        "--transcripts", "both", "--quiet"], check=True)


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def bits(t):
    """A float tensor's bits, so that equal means bit for bit."""
    return t.contiguous().view(torch.int32)


class CodedDevice(unittest.TestCase):
    K, B = 4, 300

    def frames(self, loader):
        return [(x.clone(), y.clone()) for x, y in loader]

    def test_frame_loader_every_mode(self):
        for dt in BYTES:
            path = os.path.join(TMP, dt)
            want = self.frames(cxt.Loader(path, self.K, self.B, seed=2, threads=2))
            for mode in ("stream", "resident"):
                G = cxt.Loader(path, self.K, self.B, seed=2, threads=2, gpu_emulate=True,
                               gpu_mode=mode)
                got = self.frames(G)
                self.assertEqual(G.gpu_mode, mode)
                self.assertEqual(len(got), len(want))
                for (gx, gy), (hx, hy) in zip(got, want):
                    self.assertTrue(torch.equal(bits(gx), bits(hx)), f"{dt} {mode}")
                    self.assertTrue(torch.equal(gy, hy))
                G.close()
            # the pool serves its block order: the same windows with their
            # labels, each once, in segments of a fraction of the codes
            with ctxshard.open(path) as ds:
                seg = 2 * ds.info["max_length"] * ds.dim * BYTES[dt]
                ring = 3 * self.B * (ds.input_size(self.K) * 4 + 8 + 24)
                heads = ds.num_utterances * (8 + 8 * ds.dim if dt == "q8" else 8)
            P = cxt.Loader(path, self.K, self.B, seed=2, gpu_emulate=True, gpu_mode="pool",
                           gpu_budget=ring + heads + 4 * seg)
            got = self.frames(P)
            self.assertEqual(P.gpu_mode, "pool")
            self.assertLess(P.gpu_info["pool_utterances"] * 3, ds.num_utterances)

            def rows(batches):
                x = torch.cat([bits(b[0]) for b in batches]).numpy()
                y = torch.cat([b[1] for b in batches]).numpy()
                return sorted(r.tobytes() + int(v).to_bytes(8, "little", signed=True)
                              for r, v in zip(x, y))
            self.assertEqual(rows(got), rows(want), dt)

    def test_utterance_loader(self):
        for dt in BYTES:
            path = os.path.join(TMP, dt)
            for norm in (False, True):
                kw = dict(seed=3, threads=2, normalize=norm)
                G = cxt.UtteranceLoader(path, 9000, gpu_emulate=True, **kw)
                C = cxt.UtteranceLoader(path, 9000, **kw)
                self.assertEqual(G.gpu_mode, "device")
                got = [[t.clone() for t in b] for b in G]
                want = [[t.clone() for t in b] for b in C]
                self.assertEqual(len(got), len(want))
                self.assertGreater(len(got), 1)
                for g, c in zip(got, want):
                    self.assertEqual(len(g), len(c))
                    self.assertTrue(torch.equal(bits(g[0]), bits(c[0])), f"{dt} {norm}")
                    for u, v in zip(g[1:], c[1:]):
                        self.assertTrue(torch.equal(u, v))
                G.close()

    def test_damaged_header_is_refused(self):
        path = os.path.join(GOLDEN, "q8-bad-header")
        for mode in ("stream", "resident", "pool"):
            with self.assertRaises(ctxshard.CtxshardError) as cm:
                next(iter(cxt.Loader(path, 1, 4, labels=False, gpu_emulate=True, gpu_mode=mode,
                                     gpu_budget=1 << 20)))
            msg = str(cm.exception)
            for part in ("shard-000000.cxs", "QHEADERS entry of utterance", "(number 1)", "range"):
                self.assertIn(part, msg, mode)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            next(iter(cxt.UtteranceLoader(path, 100, gpu_emulate=True)))
        self.assertIn("range", str(cm.exception))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
