"""Utterance mixtures (ctxshard.UtteranceMixture, UtteranceLoader([a, b, c],
weights=...)): every padded batch (features, lengths, frame labels, CTC
targets) and source index equals what an independent reference computes
from the raw arrays given to the Writer; per epoch each source gives
exactly its quota of utterances; no utterance twice within a pass; every
batch within the frame budget; resume 2 -> 3 -> 1 ranks mid-epoch through
state_dict with nothing repeated or lost; vocabularies mapped by symbol or
refused naming the symbols; per-source or one given normalisation;
temperature and epoch size; `ctxshard bench-utt A B C --weights`.

usage: /usr/bin/python3 tests/python/mixutt_test.py BUILD_DIR SOURCE_ROOT"""
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

TMP = tempfile.mkdtemp(prefix="ctxshard-mixutt-")
VOCAB = ["sil", "aa", "b", "k", "s"]
D = 6
BUDGET = 2400


def make(name, n_utts, seed, dtype="float32", vocab=VOCAB, dim=D, lo=20, hi=400):
    """A dataset of n_utts random utterances with frame labels and label
    sequences; the raw arrays by id."""
    rng = np.random.default_rng(seed)
    raw = {}
    w = ctxshard.Writer(os.path.join(TMP, name), dtype=dtype, vocab=vocab, transcripts="both")
    for u in range(n_utts):
        T = int(rng.integers(lo, hi))
        x = (rng.standard_normal((T, dim)) * 3 + u).astype(np.float32)
        y = rng.integers(0, len(vocab), T)
        seq = rng.integers(0, len(vocab), int(rng.integers(1, 30)))
        uid = f"{name}-{u:04d}"
        w.add(uid, x, labels=y, seq=seq)
        raw[uid] = (x, y, seq)
    w.commit()
    return os.path.join(TMP, name), raw


class Ref:
    """One source, independently: its utterances in the dataset's storage
    order (ids) from the raw arrays."""

    def __init__(self, path, raw, dtype, vocab):
        ds = ctxshard.Dataset(path)
        self.utts = []
        for uid in ds.ids:
            x, y, seq = raw[uid]
            if dtype == "float16":
                x = x.astype(np.float16).astype(np.float32)
            self.utts.append((x, y, seq))
        self.vocab = vocab
        self.mean = np.asarray(ds.stats.mean, np.float64)
        self.var = np.asarray(ds.stats.var, np.float64)

    def features(self, u, norm=None):
        x = self.utts[u][0]
        if norm is None:
            return x
        mean, var = norm
        scale = np.where(var > 0, 1 / np.sqrt(np.where(var > 0, var, 1)), 1.0)
        return ((x.astype(np.float64) - mean) * scale).astype(np.float32)


class MixUttTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        perm = ["b", "sil", "s", "aa", "k"]  # the same symbols, another order
        # the third source's utterances are longer: the buckets see it
        cls.specs = [("a", 13, 1, "float32", VOCAB, 20, 400),
                     ("b", 29, 2, "float16", perm, 20, 400),
                     ("c", 47, 3, "float32", VOCAB, 100, 600)]
        cls.paths, cls.refs = [], []
        for name, n, seed, dtype, voc, lo, hi in cls.specs:
            p, raw = make(name, n, seed, dtype, voc, lo=lo, hi=hi)
            cls.paths.append(p)
            cls.refs.append(Ref(p, raw, dtype, voc))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(TMP, ignore_errors=True)

    def mapped(self, s, labels):
        """Source s's labels in source 0's vocabulary, by symbol."""
        return np.array([VOCAB.index(self.refs[s].vocab[v]) for v in labels], np.int64)

    def check_batch(self, b, norm=None):
        x, lengths, y, t, tl = b
        n = len(x)
        T = int(lengths.max())
        self.assertEqual(x.shape, (n, T, D))
        self.assertLessEqual(n * T, BUDGET)
        for j in range(n):
            s, u = int(b.source[j]), int(b.utterances[j])
            r = self.refs[s]
            nrm = (r.mean, r.var) if norm == "own" else norm
            fx = r.features(u, nrm)
            L = len(fx)
            self.assertEqual(int(lengths[j]), L)
            np.testing.assert_array_equal(x[j, :L].numpy(), fx)
            self.assertTrue(bool((x[j, L:] == 0).all()))
            np.testing.assert_array_equal(y[j, :L].numpy(), self.mapped(s, r.utts[u][1]))
            self.assertTrue(bool((y[j, L:] == ct.PAD_LABEL).all()))
            seq = self.mapped(s, r.utts[u][2])
            self.assertEqual(int(tl[j]), len(seq))
            np.testing.assert_array_equal(t[j, :len(seq)].numpy(), seq)
            self.assertTrue(bool((t[j, len(seq):] == ct.PAD_LABEL).all()))

    def test_batches_sources_quotas_and_passes(self):
        """Two ranks, weights 3:1:1 over three epochs: every batch exact
        against the raw arrays; each epoch gives each source its quota, and
        each rank each source's share of what it was served to within one
        utterance; over the epochs every utterance of a source as often as
        any other to within one; both ranks as many batches."""
        W = 2
        seen = collections.Counter()
        quota_total = None
        for epoch in range(3):
            per = collections.Counter()
            lens = []
            for r in range(W):
                L = ct.UtteranceLoader(self.paths, BUDGET, weights=[3, 1, 1], rank=r,
                                       world_size=W, seed=4)
                L.set_epoch(epoch)
                q, E = L.quotas, L.sampler.epoch_size
                self.assertEqual(sum(q), E)
                self.assertEqual(E, sum(len(ref.utts) for ref in self.refs))
                k, mine = 0, collections.Counter()
                for i, b in enumerate(L):
                    k += 1
                    if epoch == 0 and (i < 3 or i % 5 == 0):
                        self.check_batch(b)
                    self.assertEqual(L.batch_info["index"], i)
                    if b.repeat:
                        continue  # the last round's padding
                    for s, u in zip(b.source.tolist(), b.utterances.tolist()):
                        per[s] += 1
                        mine[s] += 1
                        seen[(s, u)] += 1
                    # stratified by shares: the batch holds them to within 2
                    c = collections.Counter(b.source.tolist())
                    for s in range(3):
                        self.assertLess(abs(c[s] - len(b[0]) * q[s] / E), 2.0)
                lens.append(k)
                n = sum(mine.values())
                for s in range(3):
                    self.assertLessEqual(abs(mine[s] - n * q[s] / E), 1.0, (epoch, r, s))
            self.assertEqual(lens[0], lens[1])
            self.assertEqual([per[s] for s in range(3)], q)
            quota_total = [3 * x for x in q]
        for s in range(3):
            n = len(self.refs[s].utts)
            counts = [seen[(s, u)] for u in range(n)]
            self.assertLessEqual(max(counts) - min(counts), 1, s)
            self.assertEqual(sum(counts), quota_total[s])

    def test_normalised_per_source_or_by_one_set(self):
        L = ct.UtteranceLoader(self.paths, BUDGET, weights=[1, 1, 1], normalize=True)
        self.assertEqual(L.state_dict()["normalization"], "per-source")
        for i, b in enumerate(L):
            if i < 4:
                self.check_batch(b, "own")
        train = ctxshard.Dataset(self.paths[2])
        L = ct.UtteranceLoader(self.paths, BUDGET, weights=[1, 1, 1], normalize=train)
        self.assertEqual(L.state_dict()["normalization"], "given")
        st = (np.asarray(train.stats.mean, np.float64), np.asarray(train.stats.var, np.float64))
        for i, b in enumerate(L):
            if i < 4:
                self.check_batch(b, st)

    def test_resume_2_to_3_to_1_ranks(self):
        """A run saved on 2 ranks continues on 3, then on 1: together they
        serve exactly the epoch one rank serves, nothing twice."""
        self.resume_2_3_1(dict(weights=[2, 1, 1], seed=9, epoch_size=300))

    def resume_2_3_1(self, args):
        ref = collections.Counter()
        for b in ct.UtteranceLoader(self.paths, BUDGET, **args):
            ref.update(zip(b.source.tolist(), b.utterances.tolist()))
        self.assertEqual(sum(ref.values()), 300)
        got = collections.Counter()

        def run(world, state, steps):
            last = None
            for r in range(world):
                L = ct.UtteranceLoader(self.paths, BUDGET, rank=r, world_size=world, **args)
                if state is not None:
                    L.load_state_dict(state)
                for i, b in enumerate(L):
                    if not b.repeat:
                        got.update(zip(b.source.tolist(), b.utterances.tolist()))
                    if steps is not None and i + 1 == steps:
                        break
                if r == 0:
                    last = L.state_dict()
            return last

        st = run(2, None, 8)
        self.assertEqual(st["global_position"], 16)
        st = run(3, st, 5)
        self.assertEqual(st["global_position"], 16 + 15)
        st = run(1, st, None)
        self.assertEqual(st["epoch"], 1)
        self.assertEqual(got, ref)
        other = ct.UtteranceLoader(self.paths, BUDGET, **dict(args, weights=[1, 1, 1]))
        with self.assertRaises(ValueError):
            other.load_state_dict(st)
        return st

    def test_block_order(self):
        """memory= (block order): a budget too small says the least that
        would do, and that does; twice it: every batch exact against the raw
        arrays, each source its quota, no utterance twice within a pass,
        every batch holding the shares, on 2 ranks as many batches each;
        resume 2 -> 3 -> 1 ranks with nothing repeated or lost, and a
        state of another budget refused."""
        with self.assertRaises(ValueError) as cm:
            ct.UtteranceLoader(self.paths, BUDGET, memory="10K")
        msg = str(cm.exception)
        self.assertIn("memory= of at least", msg)
        self.assertIn(f"source 0 ({self.paths[0]}", msg)
        need = int(msg.rsplit("at least ", 1)[1].split()[0])
        ct.UtteranceLoader(self.paths, BUDGET, memory=need)
        mem = 2 * need
        with self.assertRaises(ValueError):
            ct.UtteranceLoader(self.paths, BUDGET, memory=mem, shuffle=False)
        with self.assertRaises(ValueError):
            ctxshard.UtteranceMixture(self.paths, BUDGET, blocks=2)
        seen = collections.Counter()
        for epoch in range(2):
            per, lens = collections.Counter(), []
            for r in range(2):
                L = ct.UtteranceLoader(self.paths, BUDGET, weights=[3, 1, 1], memory=mem,
                                       blocks=2, rank=r, world_size=2, seed=6)
                L.set_epoch(epoch)
                self.assertEqual((L.state_dict()["memory"], L.state_dict()["blocks"]), (mem, 2))
                q, E = L.quotas, L.sampler.epoch_size
                k = 0
                for b in L:
                    k += 1
                    self.check_batch(b)
                    if b.repeat:
                        continue
                    c = collections.Counter(b.source.tolist())
                    for s in range(3):
                        self.assertLess(abs(c[s] - len(b[0]) * q[s] / E), 2.0)
                    per.update(b.source.tolist())
                    seen.update(zip(b.source.tolist(), b.utterances.tolist()))
                lens.append(k)
            self.assertEqual(lens[0], lens[1])
            self.assertEqual([per[s] for s in range(3)], q)
        for s in range(3):  # the passes: every utterance as often as any other, to one
            n = len(self.refs[s].utts)
            counts = [seen[(s, u)] for u in range(n)]
            self.assertLessEqual(max(counts) - min(counts), 1, s)
        st = self.resume_2_3_1(dict(weights=[2, 1, 1], seed=9, epoch_size=300, memory=mem,
                                    blocks=2))
        other = ct.UtteranceLoader(self.paths, BUDGET, weights=[2, 1, 1], seed=9,
                                   epoch_size=300, memory=mem + 4096, blocks=2)
        with self.assertRaises(ValueError) as cm:
            other.load_state_dict(st)
        self.assertIn("memory", str(cm.exception))

    def test_drop_last_resume_on_other_ranks_and_closed_datasets(self):
        """drop_last: a state saved on 3 ranks loads on 2 and on 4 (the
        epoch's global batches do not depend on the ranks) and they serve
        exactly the whole rounds that are left, nothing lost; a mixture
        keeps its datasets open after the caller closes them."""
        args = dict(weights=[2, 1, 1], seed=3, drop_last=True, epoch_size=200)
        N = ct.UtteranceLoader(self.paths, BUDGET, **args).global_batches(0)
        st = None
        for r in range(3):
            L = ct.UtteranceLoader(self.paths, BUDGET, rank=r, world_size=3, **args)
            it = iter(L)
            next(it), next(it)
            if r == 0:
                st = L.state_dict()
        self.assertEqual((st["epoch"], st["global_position"], st["global_batches"]), (0, 6, N))
        for M in (2, 4):
            globs = []
            for r in range(M):
                L = ct.UtteranceLoader(self.paths, BUDGET, rank=r, world_size=M, **args)
                L.load_state_dict(st)
                self.assertEqual(L.state_dict()["global_position"], 6)
                for b in L:
                    globs.append(L.batch_info["global"])
            self.assertEqual(sorted(globs), list(range(6, 6 + (N - 6) // M * M)), M)
        ds = [ctxshard.Dataset(p) for p in self.paths]
        L = ct.UtteranceLoader(ds, BUDGET, weights=[1, 1, 1])
        for d in ds:
            d.close()
        self.assertEqual(sum(len(b[0]) for b in L if not b.repeat), L.sampler.epoch_size)

    def test_vocabularies_widths_and_refusals(self):
        p, _ = make("z", 3, 8, vocab=["sil", "aa", "b", "k", "zz"])
        with self.assertRaises(ValueError) as cm:
            ct.UtteranceLoader([self.paths[0], p], BUDGET)
        msg = str(cm.exception)
        self.assertIn('"zz"', msg)
        self.assertIn('"s"', msg)
        ct.UtteranceLoader([self.paths[0], p], BUDGET, labels=False, targets=False)
        q, _ = make("wide", 2, 9, dim=D + 1)
        with self.assertRaises(ValueError) as cm:
            ct.UtteranceLoader([self.paths[0], q], BUDGET)
        self.assertIn("same width", str(cm.exception))
        with self.assertRaises(ValueError) as cm:
            ct.UtteranceLoader(self.paths, 300)  # below the longest utterances
        self.assertIn('long_utterances="alone"', str(cm.exception))
        with self.assertRaises(TypeError):  # a misspelt option is not ignored
            ct.UtteranceLoader(self.paths, BUDGET, drop_lst=False)
        with self.assertRaises(ValueError):
            ctxshard.UtteranceMixture(self.paths, BUDGET, epoch_size=2**63)

    def test_temperature_epoch_size_sampler(self):
        n = [len(r.utts) for r in self.refs]
        m = ctxshard.UtteranceMixture(self.paths, BUDGET, temperature=2, epoch_size=500)
        self.assertEqual(sum(m.quotas), 500)
        p = np.sqrt(n) / np.sqrt(n).sum()
        np.testing.assert_allclose(m.shares, p)
        for s in range(3):
            self.assertLessEqual(abs(m.quotas[s] - 500 * p[s]), 1.0)
        g, mine = m.lengths(0)
        self.assertEqual(g, mine)
        got = collections.Counter()
        for pos in range(mine):
            utts, sources, gl, rep = m.batch(0, pos)
            self.assertEqual(gl, pos)
            self.assertFalse(rep)
            self.assertTrue(np.all(np.diff(sources.astype(int)) >= 0))  # grouped by source
            got.update(sources.tolist())
        self.assertEqual([got[s] for s in range(3)], m.quotas)
        with self.assertRaises(IndexError):
            m.batch(0, mine)
        with self.assertRaises(ValueError):
            ctxshard.UtteranceMixture(self.paths, BUDGET, weights=[1, 2])
        with self.assertRaises(ValueError):
            ctxshard.UtteranceMixture(self.paths, BUDGET, stratify="random")
        # by length over the whole mixture: the same quotas, less padding
        # (the third source's utterances are longer)
        pad = {}
        for how in ("shares", "length"):
            L = ct.UtteranceLoader(self.paths, BUDGET, weights=[1, 1, 1], stratify=how, seed=2)
            got, real, padded = collections.Counter(), 0, 0
            for b in L:
                if not b.repeat:
                    got.update(b.source.tolist())
                real += int(b[1].sum())
                padded += b[0].shape[0] * b[0].shape[1]
            self.assertEqual([got[s] for s in range(3)], L.quotas)
            self.assertEqual(L.state_dict()["stratify"], how)
            pad[how] = padded / real
        self.assertLess(pad["length"], pad["shares"])

    def test_cli_bench_utt_mixture(self):
        p = subprocess.run([EXE, "bench-utt", *self.paths, "--weights", "3,1,1", "--frame-budget",
                            str(BUDGET), "--batches", "20"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("mixture of 3 datasets", p.stdout)
        self.assertIn("share 0.6000", p.stdout)
        p = subprocess.run([EXE, "bench-utt", *self.paths, "--frame-budget", str(BUDGET),
                            "--memory", "1M", "--blocks", "2"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("in block order within 1048576 bytes (2 blocks a group)", p.stdout)
        p = subprocess.run([EXE, "bench-utt", *self.paths, "--frame-budget", str(BUDGET),
                            "--memory", "10K"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("memory_bytes of at least", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
