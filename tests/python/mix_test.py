"""Mixtures of datasets (ctxshard.Mixture, Loader([a, b, c], weights=...)):
every window, label and source index equals what an independent reference
computes from the raw arrays given to the Writer; per epoch each source
gives exactly its quota and each rank its share to within one sample; no
frame twice within a pass; resume 2 -> 3 -> 1 ranks mid-epoch through
state_dict with nothing repeated or lost; vocabularies mapped by symbol or
refused naming the symbols; per-source or one given normalisation;
temperature and epoch size; `ctxshard bench-read A B C --weights`.

usage: /usr/bin/python3 tests/python/mix_test.py BUILD_DIR SOURCE_ROOT"""
import collections
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
import torch  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.torch as ct  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-mix-")
VOCAB = ["sil", "aa", "b", "k", "s"]
K, D = 2, 6


def make(name, n_utts, seed, dtype="float32", vocab=VOCAB, dim=D):
    """A dataset of n_utts random utterances; the raw arrays by id."""
    rng = np.random.default_rng(seed)
    raw = {}
    w = ctxshard.Writer(os.path.join(TMP, name), dtype=dtype, vocab=vocab)
    for u in range(n_utts):
        T = int(rng.integers(20, 400))
        x = (rng.standard_normal((T, dim)) * 3 + u).astype(np.float32)
        y = rng.integers(0, len(vocab), T)
        uid = f"{name}-{u:04d}"
        w.add(uid, x, labels=y)
        raw[uid] = (x, y)
    w.commit()
    return os.path.join(TMP, name), raw


class Ref:
    """The independent reference of one source: its frames in the
    dataset's storage order (ids), windows and labels from the raw arrays."""

    def __init__(self, path, raw, dtype, vocab):
        ds = ctxshard.Dataset(path)
        self.x, self.y, self.start, self.len = [], [], [], []
        at = 0
        for uid in ds.ids:
            x, y = raw[uid]
            if dtype == "float16":
                x = x.astype(np.float16).astype(np.float32)
            self.x.append(x)
            self.y.append(y)
            self.start.append(at)
            self.len.append(len(x))
            at += len(x)
        self.frames = at
        self.xs, self.ys = np.concatenate(self.x), np.concatenate(self.y)
        self.utt = np.repeat(np.arange(len(self.len)), self.len)
        self.vocab = vocab
        self.mean = np.asarray(ds.stats.mean, np.float64)
        self.var = np.asarray(ds.stats.var, np.float64)

    def window(self, f, norm=None):
        u = self.utt[f]
        a, T = self.start[u], self.len[u]
        out = np.zeros((2 * K + 1, D), np.float32)
        for r in range(-K, K + 1):
            g = f + r
            if a <= g < a + T:
                row = self.xs[g].astype(np.float64)
                if norm is not None:
                    mean, var = norm
                    scale = np.where(var > 0, 1 / np.sqrt(np.where(var > 0, var, 1)), 1.0)
                    row = (row - mean) * scale
                out[r + K] = row.astype(np.float32)
        return out.reshape(-1)


class MixTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        perm = ["b", "sil", "s", "aa", "k"]  # the same symbols, another order
        cls.specs = [("a", 9, 1, "float32", VOCAB), ("b", 17, 2, "float16", perm),
                     ("c", 31, 3, "float32", VOCAB)]
        cls.paths, cls.refs = [], []
        for name, n, seed, dtype, voc in cls.specs:
            p, raw = make(name, n, seed, dtype, voc)
            cls.paths.append(p)
            cls.refs.append(Ref(p, raw, dtype, voc))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(TMP, ignore_errors=True)

    def mapped(self, s, y):
        """Source s's label y in source 0's vocabulary, by symbol."""
        return VOCAB.index(self.refs[s].vocab[y])

    def check_batch(self, b, norm=None):
        x, y = b
        self.assertEqual(x.shape[1], (2 * K + 1) * D)
        for j in range(len(x)):
            s, f = int(b.source[j]), int(b.frames[j])
            r = self.refs[s]
            nrm = (r.mean, r.var) if norm == "own" else norm
            np.testing.assert_array_equal(x[j].numpy(), r.window(f, nrm))
            self.assertEqual(int(y[j]), self.mapped(s, int(r.ys[f])))

    def test_windows_labels_sources_and_shares(self):
        """Two ranks, weights 3:1:1: every sample exact against the raw
        arrays; the epoch gives each source its quota; each rank each
        source's share to within one; no frame twice in a pass."""
        W = 2
        per = collections.Counter()
        seen = collections.Counter()
        for r in range(W):
            L = ct.Loader(self.paths, K, 50, weights=[3, 1, 1], rank=r, world_size=W, seed=4)
            q, E = L.quotas, L.sampler.epoch_size
            self.assertEqual(sum(q), E)
            self.assertEqual(E, sum(ref.frames for ref in self.refs))
            mine = collections.Counter()
            n = 0
            for i, b in enumerate(L):
                if i < 3 or i % 7 == 0:
                    self.check_batch(b)
                self.assertEqual(b.repeat, L.sampler.repeat(i))
                if b.repeat:
                    continue  # the last round's padding
                n += len(b[0])
                for s, f in zip(b.source.tolist(), b.frames.tolist()):
                    mine[s] += 1
                    seen[(s, f)] += 1
                # the batch holds the shares to within a little over a sample
                c = collections.Counter(b.source.tolist())
                for s in range(3):
                    self.assertLess(abs(c[s] - len(b[0]) * q[s] / E), 2.0)
            for s in range(3):
                self.assertLessEqual(abs(mine[s] - n * q[s] / E), 1.0 + 1e-9,
                                     f"rank {r} source {s}: {mine[s]} of {n}")
                per[s] += mine[s]
        self.assertEqual([per[s] for s in range(3)], q)
        for s in range(3):  # a pass at a time: floor or ceil(q / n) each
            counts = [seen[(s, f)] for f in range(self.refs[s].frames)]
            lo = q[s] // self.refs[s].frames
            self.assertTrue(all(lo <= c <= lo + 1 for c in counts), (s, min(counts),
                                                                     max(counts)))
            self.assertEqual(sum(counts), q[s])

    def test_normalised_per_source_or_by_one_set(self):
        L = ct.Loader(self.paths, K, 64, weights=[1, 1, 1], normalize=True)
        self.assertEqual(L.state_dict()["normalization"], "per-source")
        for i, b in enumerate(L):
            if i < 4:
                self.check_batch(b, "own")
        train = ctxshard.Dataset(self.paths[2])
        L = ct.Loader(self.paths, K, 64, weights=[1, 1, 1], normalize=train)
        self.assertEqual(L.state_dict()["normalization"], "given")
        st = (np.asarray(train.stats.mean, np.float64), np.asarray(train.stats.var, np.float64))
        for i, b in enumerate(L):
            if i < 4:
                self.check_batch(b, st)

    def test_resume_2_to_3_to_1_ranks(self):
        """A run saved on 2 ranks continues on 3, then on 1: together they
        serve exactly the epoch one rank serves, nothing twice."""
        args = dict(weights=[2, 1, 1], seed=9)
        ref = collections.Counter()
        for b in ct.Loader(self.paths, K, 40, **args):
            ref.update(zip(b.source.tolist(), b.frames.tolist()))
        got = collections.Counter()

        def run(world, state, steps):
            last = None
            for r in range(world):
                L = ct.Loader(self.paths, K, 40, rank=r, world_size=world, **args)
                if state is not None:
                    L.load_state_dict(state)
                for i, b in enumerate(L):
                    if not b.repeat:  # not the last round's padding
                        got.update(zip(b.source.tolist(), b.frames.tolist()))
                    if steps is not None and i + 1 == steps:
                        break  # (a batch handed out counts as served)
                if r == 0:
                    last = L.state_dict()
            return last

        st = run(2, None, 30)
        self.assertEqual(st["global_position"], 60)
        st = run(3, st, 25)
        self.assertEqual(st["global_position"], 60 + 75)
        st = run(1, st, None)
        self.assertEqual(st["epoch"], 1)
        self.assertEqual(got, ref)
        # a state of other shares is refused
        other = ct.Loader(self.paths, K, 40, weights=[1, 1, 1], seed=9)
        with self.assertRaises(ValueError):
            other.load_state_dict(st)

    def test_vocabularies_by_symbol(self):
        p, _ = make("z", 3, 8, vocab=["sil", "aa", "b", "k", "zz"])
        with self.assertRaises(ValueError) as cm:
            ct.Loader([self.paths[0], p], K, 32)
        msg = str(cm.exception)
        self.assertIn('"zz"', msg)
        self.assertIn('"s"', msg)
        ct.Loader([self.paths[0], p], K, 32, labels=False)  # features alone: fine
        q, _ = make("wide", 2, 9, dim=D + 1)
        with self.assertRaises(ValueError) as cm:
            ct.Loader([self.paths[0], q], K, 32)
        self.assertIn("same width", str(cm.exception))

    def test_temperature_epoch_size_sampler(self):
        n = [r.frames for r in self.refs]
        m = ctxshard.Mixture(self.paths, 100, temperature=2, epoch_size=5000)
        self.assertEqual(sum(m.quotas), 5000)
        p = np.sqrt(n) / np.sqrt(n).sum()
        np.testing.assert_allclose(m.shares, p)
        for s in range(3):
            self.assertLessEqual(abs(m.quotas[s] - 5000 * p[s]), 1.0)
        frames, sources, g = m.batch(0, 0)
        self.assertEqual(len(frames), 100)
        self.assertEqual(g, 0)
        self.assertTrue(np.all(np.diff(sources.astype(int)) >= 0))  # grouped by source
        with self.assertRaises(ValueError):
            ctxshard.Mixture(self.paths, 100, weights=[1, 2])
        with self.assertRaises(ValueError):
            ctxshard.Mixture(self.paths, 100, weights=[1, 1, 1], temperature=2)
        with self.assertRaises(ValueError):
            ct.Loader(self.paths, K, 32, shuffle="block", memory="1G")

    def test_cli_bench_read_mixture(self):
        p = subprocess.run([EXE, "bench-read", *self.paths, "--weights", "3,1,1", "--context",
                            "2", "--batch", "100", "--batches", "50"], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("mixture of 3 datasets", p.stdout)
        self.assertIn("share 0.6000", p.stdout)
        p = subprocess.run([EXE, "bench-read", *self.paths, "--weights", "3,1"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("2 weights for 3 datasets", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
