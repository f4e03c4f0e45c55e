"""Mixtures of datasets (ctxshard.Mixture, Loader([a, b, c], weights=...)):
every window, label and source index equals what an independent reference
computes from the raw arrays given to the Writer; per epoch each source
gives exactly its quota and each rank its share to within one sample; no
frame twice within a pass; resume 2 -> 3 -> 1 ranks mid-epoch through
state_dict with nothing repeated or lost; vocabularies mapped by symbol or
refused naming the symbols; per-source or one given normalisation;
temperature and epoch size; `ctxshard bench-read A B C --weights`; a
cancel from another thread or Ctrl-C ends a mixture's wait for a batch.

usage: /usr/bin/python3 tests/python/mix_test.py BUILD_DIR SOURCE_ROOT"""
import collections
import ctypes
import errno
import mmap
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
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
# the test hooks (CXS_LOADER_FAULT=stall:N) exist only in builds configured
# with -Dtest_hooks=true; meson says which
HOOKS = os.environ.get("CXS_TEST_HOOKS", "1") == "1"
LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.mmap.restype = ctypes.c_void_p
LIBC.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
LIBC.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
LIBC.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


BIG = []


def cold_big_sources():
    """Three datasets of 12, 36 and 72 MB (made once), their shards out of
    the page cache: (paths, shard files, their bytes)."""
    if not BIG:
        rng = np.random.default_rng(5)
        for name, frames in (("big-a", 190000), ("big-b", 560000), ("big-c", 1100000)):
            w = ctxshard.Writer(os.path.join(TMP, name), vocab=VOCAB)
            at, u = 0, 0
            while at < frames:
                n = int(rng.integers(200, 1200))
                w.add(f"{name}-{u:06d}", rng.standard_normal((n, 16)).astype(np.float32),
                      labels=rng.integers(0, len(VOCAB), n))
                at, u = at + n, u + 1
            w.commit()
            BIG.append(os.path.join(TMP, name))
    shards = [os.path.join(p, f) for p in BIG for f in os.listdir(p) if f.startswith("shard-")]
    for f in shards:
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    assert resident(shards) < 1 << 20
    return list(BIG), shards, sum(os.path.getsize(f) for f in shards)


def resident(files):
    """Bytes of the files in the page cache (mincore over a mapping of
    each, which reads nothing)."""
    tot, page = 0, os.sysconf("SC_PAGE_SIZE")
    for f in files:
        size = os.path.getsize(f)
        fd = os.open(f, os.O_RDONLY)
        try:
            a = LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
            LIBC.mincore(a, size, vec)
            LIBC.munmap(a, size)
        finally:
            os.close(fd)
        tot += sum(v & 1 for v in bytes(vec)) * page
    return tot
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

    def test_drop_last_resume_on_other_ranks_and_closed_datasets(self):
        """drop_last: saved on 1 rank one batch short of the epoch's end,
        a run on 4 ranks goes on to the next epoch (what is left is less
        than a round: cut), not refused; saved mid-epoch on 3, it serves
        on 2 the whole rounds left.  A mixture keeps its datasets open
        after the caller closes them."""
        args = dict(weights=[1, 1, 1], drop_last=True, seed=1, epoch_size=14 * 64)
        L = ct.Loader(self.paths, K, 64, **args)
        it = iter(L)
        for _ in range(13):
            next(it)
        st = L.state_dict()
        self.assertEqual((st["epoch"], st["global_position"]), (0, 13))
        L4 = ct.Loader(self.paths, K, 64, rank=0, world_size=4, **args)
        L4.load_state_dict(st)
        self.assertEqual((L4.state_dict()["epoch"], L4.state_dict()["global_position"]), (1, 0))
        self.assertEqual(len(L4), 3)
        L3 = ct.Loader(self.paths, K, 64, rank=0, world_size=3, **args)
        it = iter(L3)
        next(it), next(it)
        st = L3.state_dict()
        self.assertEqual(st["global_position"], 6)
        served = collections.Counter()
        for r in range(2):
            L2 = ct.Loader(self.paths, K, 64, rank=r, world_size=2, **args)
            L2.load_state_dict(st)
            self.assertEqual(len(L2), 4)
            for b in L2:
                served[r] += 1
        self.assertEqual(served, {0: 4, 1: 4})
        ds = [ctxshard.Dataset(p) for p in self.paths]
        L = ct.Loader(ds, K, 64, weights=[1, 1, 1])
        for d in ds:
            d.close()
        self.assertEqual(sum(len(b[0]) for b in L), L.sampler.epoch_size)
        with self.assertRaises(TypeError):  # a misspelt option is not ignored
            ct.Loader(self.paths, K, 64, drop_lst=False)
        with self.assertRaises(TypeError):  # nor an option in the wrong place
            ct.Loader(self.paths, K, 64, True, 0, False, True)

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
        with self.assertRaises(ValueError) as cm:  # block order needs its budget
            ct.Loader(self.paths, K, 32, shuffle="block")
        self.assertIn("memory=", str(cm.exception))
        with self.assertRaises(ValueError):
            ct.Loader(self.paths, K, 32, memory="1G")  # and a budget needs block order

    def test_block_order_one_budget(self):
        """shuffle="block": every frame once an epoch (natural shares), the
        first batches exact against the raw arrays, and the page cache the
        three datasets hold from a cold start stays near the one budget:
        each dataset's blocks are let go once passed (without that, all
        131 MB end up cached)."""
        L = ct.Loader(self.paths, K, 50, shuffle="block", memory="1M", blocks=2, seed=3)
        self.assertEqual(L.state_dict()["memory"], 1 << 20)
        seen = [np.zeros(r.frames, np.int64) for r in self.refs]
        for i, b in enumerate(L):
            if i < 5:
                self.check_batch(b)
            for s in range(3):
                np.add.at(seen[s], b.frames[b.source == s].numpy(), 1)
        for s in range(3):
            self.assertTrue(bool((seen[s] == 1).all()), s)
        # a budget whose shares cannot hold a dataset's longest utterance:
        # a ValueError that says what would do, and that does
        with self.assertRaises(ValueError) as cm:
            ct.Loader(self.paths, K, 50, shuffle="block", memory="10K")
        need = int(str(cm.exception).rsplit("at least ", 1)[1].split()[0])
        ct.Loader(self.paths, K, 50, shuffle="block", memory=need)
        # residency: three datasets of 12, 36 and 72 MB, a budget of 24 MB
        big, shards, total = cold_big_sources()
        L = ct.Loader(big, 3, 256, shuffle="block", memory="24M", blocks=2, seed=1, labels=False)
        peak, n = 0, 0
        for i, b in enumerate(L):
            n += len(b[0])
            if i % 50 == 0:
                peak = max(peak, resident(shards))
        self.assertEqual(n, L.sampler.epoch_size)
        # 24 MB of blocks, and what the kernel reads around the faults and
        # keeps in large folios at the blocks' edges (measured: 56 MB)
        bound = (24 << 20) + (48 << 20)
        self.assertLess(peak, bound, f"{peak} of {total} bytes cached")
        self.assertGreater(total, 120 << 20)
        # epochs cut short (a loop that breaks: the loader is freed each
        # time) let go of what they asked for: once, the blocks between the
        # consumer and the claims stayed, 110 MB after 8 such epochs
        for e in range(8):
            L.set_epoch(e)
            for i, b in enumerate(L):
                if i == 300:
                    break
        self.assertLess(resident(shards), bound)
        # a rank whose final round repeats a first-round batch lets the
        # blocks that batch read go again (once: 94 MB after 16 epochs)
        L = ct.Loader(big, 3, 256, shuffle="block", memory="24M", blocks=2, seed=1,
                      labels=False, epoch_size=256 * 118 + 5, rank=2, world_size=3)
        for e in range(16):
            L.set_epoch(e)
            self.assertEqual(sum(int(b.repeat) for b in L), 1)
        self.assertLess(resident(shards), bound)

    def test_utterance_block_order_one_budget(self):
        """UtteranceLoader([...], memory=): whole utterances of the three
        datasets (131 MB) in block order under one 24 MB budget, from a
        cold start: every utterance once an epoch (natural shares), and
        the page cache they hold stays near the budget, also after epochs
        cut short and a rank whose final round repeats (without the
        loader's letting go, all 131 MB end up cached)."""
        big, shards, total = cold_big_sources()
        L = ct.UtteranceLoader(big, 12000, memory="24M", blocks=2, seed=1, labels=False)
        self.assertGreater(len(L), 100)
        sizes = [ctxshard.Dataset(p).num_utterances for p in big]
        seen = [np.zeros(n, np.int64) for n in sizes]
        peak = 0
        for i, b in enumerate(L):
            for s in range(3):
                np.add.at(seen[s], b.utterances[b.source == s].numpy().astype(np.int64), 1)
            if i % 20 == 0:
                peak = max(peak, resident(shards))
        for s in range(3):
            self.assertTrue(bool((seen[s] == 1).all()), s)
        # about two groups of blocks (2 * blocks / (blocks + 1) of the
        # budget: 32 MB), and what the kernel reads around the faults
        bound = (24 << 20) + (48 << 20)
        self.assertLess(peak, bound, f"{peak} of {total} bytes cached")
        self.assertGreater(total, 120 << 20)
        for e in range(6):  # epochs cut short let go of what they asked for
            L.set_epoch(e)
            for i, b in enumerate(L):
                if i == len(L) // 3:
                    break
        self.assertLess(resident(shards), bound)
        L = ct.UtteranceLoader(big, 12000, memory="24M", blocks=2, seed=1, labels=False,
                               rank=2, world_size=3)
        reps = 0
        for e in range(8):
            L.set_epoch(e)
            reps += sum(int(b.repeat) for b in L)
        self.assertGreater(reps, 0)
        self.assertLess(resident(shards), bound)
        print(f"utterance mixture in block order: peak {peak / 2**20:.1f} MB cached of "
              f"{total / 2**20:.1f} MB under a 24 MB budget", file=sys.stderr)

    def mixtures(self):
        """Both kinds of mixture loader over the three sources: (name, a
        fresh Python loader, its C next_timed and cancel, and a batch's
        (x, source, frames or utterances) from the C struct)."""
        def frames(b):
            n, W = b.n, (2 * K + 1) * D
            return (np.ctypeslib.as_array(ctypes.cast(b.x, ctypes.POINTER(ctypes.c_float)),
                                          (n, W)).copy(),
                    np.ctypeslib.as_array(ctypes.cast(b.source, ctypes.POINTER(ctypes.c_uint32)),
                                          (n,)).astype(np.int64),
                    np.ctypeslib.as_array(ctypes.cast(b.frames, ctypes.POINTER(ctypes.c_uint64)),
                                          (n,)).astype(np.int64))

        def utts(mb):
            b = mb.batch.contents
            n, T = b.n, b.tmax
            return (np.ctypeslib.as_array(ctypes.cast(b.x, ctypes.POINTER(ctypes.c_float)),
                                          (n, T, D)).copy(),
                    np.ctypeslib.as_array(ctypes.cast(mb.source, ctypes.POINTER(ctypes.c_uint32)),
                                          (n,)).astype(np.int64),
                    np.ctypeslib.as_array(ctypes.cast(b.utts, ctypes.POINTER(ctypes.c_uint64)),
                                          (n,)).astype(np.int64))
        from ctxshard._native import lib as L
        return [("frames", lambda: ct.Loader(self.paths, K, 50, weights=[3, 1, 1], seed=4),
                 ct._n.MixFrames, L.cxs_mix_loader_next_timed, L.cxs_mix_loader_cancel,
                 L.cxs_mix_loader_free, frames, lambda b: (b[0].numpy(), b.source.numpy(),
                                                           b.frames.numpy())),
                ("utterances", lambda: ct.UtteranceLoader(self.paths, 1000, seed=4),
                 ct._n.MixUtts, L.cxs_mix_utt_loader_next_timed, L.cxs_mix_utt_loader_cancel,
                 L.cxs_mix_utt_loader_free, utts, lambda b: (b[0].numpy(), b.source.numpy(),
                                                             b.utterances.numpy()))]

    def test_cancel_ends_a_waiting_next_and_the_epoch_goes_on(self):
        """cxs_mix_loader_cancel / cxs_mix_utt_loader_cancel from another
        thread end a next() that waits for a batch (the test hook
        CXS_LOADER_FAULT=stall:3 holds batch 3's fill until it is thrown
        away) with -ECANCELED; the next calls serve batch 3 and the rest of
        the epoch exactly; a timed next that expires changes nothing.
        Before, the mixtures had neither call."""
        if not HOOKS:
            self.skipTest("built without the test hooks (-Dtest_hooks=true): no stall")
        for name, make_l, btype, timed, cancel, free, of_c, of_py in self.mixtures():
            ref = [of_py(b) for b in make_l()]  # (before the hook is set)
            self.assertGreater(len(ref), 6, name)
            py = make_l()
            os.environ["CXS_LOADER_FAULT"] = "stall:3"
            ptr = py._create(py._mix_now(), py.epoch, 0)
            try:
                bp, diag = ctypes.POINTER(btype)(), ct._n.Diag()
                got = []
                for i in range(3):
                    self.assertEqual(timed(ptr, ctypes.byref(bp), 60000, ctypes.byref(diag)), 0,
                                     diag.message)
                    got.append(of_c(bp.contents))
                self.assertEqual(timed(ptr, ctypes.byref(bp), 1, ctypes.byref(diag)),
                                 -errno.ETIMEDOUT, name)  # batch 3 held back
                self.assertFalse(bp)
                waited = []

                def wait():  # (ctypes lets go of the GIL while it waits)
                    waited.append(timed(ptr, ctypes.byref(bp), 600000, None))

                t = threading.Thread(target=wait)
                t.start()
                self.assertEqual(cancel(ptr), 0)
                t.join(60)
                self.assertFalse(t.is_alive(), f"{name}: next() still waits after the cancel")
                self.assertEqual(waited, [-errno.ECANCELED], name)
                while True:
                    rc = timed(ptr, ctypes.byref(bp), 60000, ctypes.byref(diag))
                    self.assertEqual(rc, 0, f"{name}: {diag.message}")
                    if not bp:
                        break
                    got.append(of_c(bp.contents))
            finally:
                free(ptr)
                del os.environ["CXS_LOADER_FAULT"]
            self.assertEqual(len(got), len(ref), name)
            for i, (a, b) in enumerate(zip(got, ref)):
                for u, v in zip(a, b):
                    np.testing.assert_array_equal(u, v, f"{name} batch {i}")

    def test_ctrl_c_ends_a_waiting_mixture_next(self):
        """SIGINT to a process whose MixtureLoader, or utterance mixture
        loader, waits for a batch (held back by the test hook
        CXS_LOADER_FAULT=stall:3): KeyboardInterrupt is raised (the loaders
        wait in slices of 100 ms; the bound of 10 s only keeps the test from
        hanging: before, the wait lasted for ever)."""
        if not HOOKS:
            self.skipTest("built without the test hooks (-Dtest_hooks=true): no stall")
        code = {"frames": "ct.Loader(sys.argv[1:], 3, 50, weights=[3, 1, 1], seed=4)",
                "utterances": "ct.UtteranceLoader(sys.argv[1:], 1000, seed=4)"}
        env = dict(os.environ, CXS_LOADER_FAULT="stall:3",
                   PYTHONPATH=os.path.join(SRC, "python"))
        for name, make_l in code.items():
            prog = ("import sys, ctxshard.torch as ct\n"
                    f"it = iter({make_l})\n"
                    "for _ in range(3):\n"
                    "    next(it)\n"
                    "print('waiting', flush=True)\n"
                    "try:\n"
                    "    next(it)\n"
                    "except KeyboardInterrupt:\n"
                    "    print('interrupted', flush=True)\n"
                    "    sys.exit(3)\n"
                    "print('served', flush=True)\n")
            p = subprocess.Popen([sys.executable, "-c", prog, *self.paths], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                self.assertEqual(p.stdout.readline(), "waiting\n", name)
                # its main thread in the loader's wait (a futex): the signal
                # comes while the C call waits, not before it
                sysc = f"/proc/{p.pid}/task/{p.pid}/syscall"
                for _ in range(2000):
                    try:
                        with open(sysc) as f:
                            if f.read().split()[0] == "202":
                                break
                    except OSError:
                        break  # (not readable here: the signal may come a little early)
                    time.sleep(0.005)
                p.send_signal(signal.SIGINT)
                said = select.select([p.stdout], [], [], 10)[0] and p.stdout.readline()
                if not said:
                    p.kill()
                out, err = p.communicate(timeout=120)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.communicate()
            self.assertEqual(said, "interrupted\n", f"{name}: nothing 10 s after SIGINT {err}")
            self.assertEqual(p.returncode, 3, err)

    def test_cli_bench_read_mixture(self):
        p = subprocess.run([EXE, "bench-read", *self.paths, "--weights", "3,1,1", "--context",
                            "2", "--batch", "100", "--batches", "50"], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("mixture of 3 datasets", p.stdout)
        self.assertIn("share 0.6000", p.stdout)
        p = subprocess.run([EXE, "bench-read", *self.paths, "--sampler", "block", "--memory",
                            "1M", "--blocks", "2", "--context", "2", "--batches", "30"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("in block order", p.stdout)
        p = subprocess.run([EXE, "bench-read", *self.paths, "--weights", "3,1"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("2 weights for 3 datasets", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
