"""Whole-utterance batches in Python: UtteranceLoader and UtteranceDataset
with UtteranceBatchSampler and pad_collate inside torch's DataLoader,
against numpy batches built from the raw .npy files (float32, float16 and
zstd-compressed datasets); the same batches whatever the thread count;
epochs; exact resume and elastic resume from 2 ranks to 3 and to 1.

usage: /usr/bin/python3 tests/python/utt_test.py BUILD_DIR SOURCE_ROOT"""
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
sys.path.insert(0, os.path.join(SRC, "tests", "roundtrip"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.torch as cxt  # noqa: E402
import reference  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-utt-")
RAW = os.path.join(TMP, "raw")
SEQRAW = os.path.join(TMP, "seqraw")
BUDGET = 9000


def run(*args):
    subprocess.run([EXE, *map(str, args)], check=True, stdout=subprocess.DEVNULL)


def setUpModule():
    run("synth", RAW, "--utts", 40, "--seed", 6, "--dim", 10, "--quiet")
    run("pack", RAW, os.path.join(TMP, "f32"), "--shard-size", "600K", "--quiet")
    run("pack", RAW, os.path.join(TMP, "f16"), "--dtype", "f16", "--quiet")
    run("pack", RAW, os.path.join(TMP, "zstd"), "--compress", "zstd", "--chunk-size", "32K",
        "--quiet")
    run("synth", os.path.join(TMP, "testraw"), "--utts", 5, "--seed", 7, "--dim", 10,
        "--no-transcripts", "--quiet")
    run("pack", os.path.join(TMP, "testraw"), os.path.join(TMP, "test"), "--quiet")
    # label sequences: HW3P2-style transcripts alone, and with frame labels
    run("synth", SEQRAW, "--utts", 30, "--seed", 8, "--dim", 10, "--transcripts", "sequence",
        "--quiet")
    run("pack", SEQRAW, os.path.join(TMP, "seq"), "--transcripts", "sequence", "--quiet")
    run("pack", SEQRAW, os.path.join(TMP, "seqz"), "--transcripts", "sequence", "--compress",
        "zstd", "--quiet")
    run("pack", RAW, os.path.join(TMP, "both"), "--transcripts", "both", "--quiet")
    run("pack", RAW, os.path.join(TMP, "both16"), "--transcripts", "both", "--dtype", "f16",
        "--compress", "zstd", "--quiet")


def tearDownModule():
    shutil.rmtree(TMP)


def reference_batch(utts, dtype="f32"):
    """(x, lengths, y) padded in numpy from the raw files."""
    ids = reference.utterance_ids(RAW)
    feats = [reference.load_utterance(RAW, ids[u], dtype) for u in utts]
    T = max(len(f) for f, _ in feats)
    D = feats[0][0].shape[1]
    x = np.zeros((len(utts), T, D), np.float32)
    y = np.full((len(utts), T), -100, np.int64)
    for i, (f, lab) in enumerate(feats):
        x[i, :len(f)] = f.astype(np.float32)
        y[i, :len(f)] = lab
    return x, np.array([len(f) for f, _ in feats]), y


def drain(loader):
    out = []
    for x, lengths, y in loader:
        out.append((x, lengths, y, dict(loader.batch_info)))
    return out


class Utterances(unittest.TestCase):
    def test_loader_equals_numpy_reference(self):
        for name, dt in (("f32", "f32"), ("f16", "f16"), ("zstd", "f32")):
            with self.subTest(dataset=name):
                L = cxt.UtteranceLoader(os.path.join(TMP, name), frame_budget=BUDGET, seed=2,
                                        threads=2)
                seen = []
                for x, lengths, y, info in drain(L):
                    self.assertLessEqual(x.shape[0] * x.shape[1], BUDGET)
                    rx, rl, ry = reference_batch(info["utterances"], dt)
                    np.testing.assert_array_equal(x.numpy(), rx)
                    np.testing.assert_array_equal(lengths.numpy(), rl)
                    np.testing.assert_array_equal(y.numpy(), ry)
                    self.assertEqual(info["frames"], int(rl.sum()))
                    seen += info["utterances"].tolist()
                self.assertEqual(sorted(seen), list(range(40)))
                self.assertEqual(L.epoch, 1)  # a complete pass advances the epoch

    def test_dataloader_path(self):
        p = os.path.join(TMP, "zstd")
        native = drain(cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=5, threads=1))
        ds = cxt.UtteranceDataset(p)
        bs = cxt.UtteranceBatchSampler(p, frame_budget=BUDGET, seed=5)
        dl = torch.utils.data.DataLoader(ds, batch_sampler=bs, collate_fn=cxt.pad_collate,
                                         num_workers=2)
        got = list(dl)
        self.assertEqual(len(got), len(native))
        for (x, lengths, y), (nx, nl, ny, _) in zip(got, native):
            self.assertTrue(torch.equal(x, nx) and torch.equal(lengths, nl) and
                            torch.equal(y, ny))
        # pad_collate over single utterances (pad_sequence): the same batch
        first = [ds[int(u)] for u in native[0][3]["utterances"]]
        x, lengths, y = cxt.pad_collate(first)
        self.assertTrue(torch.equal(x, native[0][0]) and torch.equal(y, native[0][2]))
        self.assertEqual(len(dl), len(bs))

    def test_threads_do_not_change_batches(self):
        p = os.path.join(TMP, "f32")
        a = drain(cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=8, threads=1))
        b = drain(cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=8, threads=4))
        self.assertEqual(len(a), len(b))
        for u, v in zip(a, b):
            self.assertTrue(torch.equal(u[0], v[0]) and torch.equal(u[2], v[2]))
        # another epoch: another grouping or order
        L = cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=8)
        L.set_epoch(1)
        c = drain(L)
        self.assertNotEqual([i[3]["utterances"].tolist() for i in a],
                            [i[3]["utterances"].tolist() for i in c])

    def test_exact_resume(self):
        p = os.path.join(TMP, "f32")
        full = drain(cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=1, threads=2))
        L = cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=1, threads=2)
        it = iter(L)
        for _ in range(4):
            next(it)
        state = L.state_dict()
        self.assertEqual(state["global_position"], 4)
        R = cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=1, threads=3)
        R.load_state_dict(state)
        rest = drain(R)
        self.assertEqual(len(rest), len(full) - 4)
        for a, b in zip(rest, full[4:]):
            self.assertTrue(torch.equal(a[0], b[0]))
        self.assertEqual(R.epoch, 1)

    def test_hostile_states(self):
        """load_state_dict range-checks the epoch and the position and
        requires every key that identifies the order (a state stripped of
        them, or of another dataset, loaded for any dataset before)."""
        p = os.path.join(TMP, "f32")
        L = cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=1)
        it = iter(L)
        for _ in range(3):
            next(it)
        state = L.state_dict()
        del it
        N = state["global_batches"]
        for key, value, msg in (
                ("epoch", 2**64 - 1, r"state\['epoch'\]=18446744073709551615 is out of range"),
                ("epoch", -1, "epoch"),
                ("global_position", N + 1, r"state\['global_position'\]=.* out of range: "
                 f"expected 0..global_batches = 0..{N}"),
                ("global_batches", N + 1, "global_batches .* does not match")):
            with self.subTest(key=key, value=value):
                R = cxt.UtteranceLoader(p, frame_budget=BUDGET, seed=1)
                with self.assertRaisesRegex(ValueError, msg):
                    R.load_state_dict(dict(state, **{key: value}))
        for key in ("seed", "epoch", "global_position", "global_batches", "sampler",
                    "frame_budget", "shuffle", "buckets", "long_utterances", "memory"):
            with self.subTest(removed=key):
                with self.assertRaisesRegex(ValueError, f"state lacks {key}"):
                    R.load_state_dict({k: v for k, v in state.items() if k != key})
        # another dataset's state (another number of batches) is refused
        other = cxt.UtteranceLoader(os.path.join(TMP, "test"), frame_budget=BUDGET, seed=1)
        with self.assertRaisesRegex(ValueError, "global_batches"):
            other.load_state_dict(state)
        with self.assertRaisesRegex(ValueError, "past the last one"):
            R.load_state_dict(dict(state, epoch=2**63 - 1, global_position=N))
        with self.assertRaisesRegex(ValueError, "epoch=18446744073709551615 is out of range"):
            R.set_epoch(2**64 - 1)
        # len(loader) after a resume: the batches that remain
        R.load_state_dict(state)
        self.assertEqual(len(R), N - 3)
        self.assertEqual(len(drain(R)), N - 3)

    def test_budget_refusal_speaks_python(self):
        """A budget an utterance does not fit is a ValueError that names the
        Python option, not the C one."""
        p = os.path.join(TMP, "f32")
        with ctxshard.open(p) as ds:
            longest = max(ds.utterance_frames(u)[1] for u in range(ds.num_utterances))
        for make, who in ((cxt.UtteranceLoader, "UtteranceLoader"),
                          (cxt.UtteranceBatchSampler, "UtteranceBatchSampler")):
            with self.assertRaises(ValueError) as cm:
                make(p, frame_budget=longest - 1)
            msg = str(cm.exception)
            self.assertNotIsInstance(cm.exception, IndexError)
            self.assertTrue(msg.startswith(f"{who}: "), msg)
            self.assertIn(f"longer than frame_budget {longest - 1}", msg)
            self.assertIn('long_utterances="alone"', msg)
            self.assertNotIn("long_alone", msg)
        S = cxt.UtteranceBatchSampler(p, frame_budget=BUDGET)
        self.assertIsInstance(S.global_batches(), int)
        self.assertEqual(S.global_batches(), len(S))

    def test_elastic_resume_2_to_3_and_1(self):
        p = os.path.join(TMP, "f32")
        kw = dict(frame_budget=BUDGET, seed=4)
        N = cxt.UtteranceBatchSampler(p, **kw).global_batches()
        first, states = [], []
        for r in range(2):
            L = cxt.UtteranceLoader(p, rank=r, world_size=2, **kw)
            it = iter(L)
            for _ in range(3):
                next(it)
                first.append(L.batch_info["global"])
            states.append(L.state_dict())
        self.assertEqual(states[0]["global_position"], 6)
        self.assertEqual(states[0], dict(states[1], rank=0))
        self.assertEqual(sorted(first), list(range(6)))
        for M in (3, 1):
            with self.subTest(world_size=M):
                rest, lens = [], []
                for r in range(M):
                    L = cxt.UtteranceLoader(p, rank=r, world_size=M, **kw)
                    L.load_state_dict(states[r % 2])
                    lens.append(len(L))
                    rest += [b[3]["global"] for b in drain(L)]
                self.assertEqual(len(set(lens)), 1)  # the same count on every rank
                # the global order goes on from 6: each once, then the
                # wrap-around padding repeats the epoch's first batches
                self.assertEqual(sorted(g for g in rest if g >= 6), list(range(6, N)))
                self.assertLess(len(rest) - (N - 6), M)
                self.assertTrue(all(g < M for g in rest if g < 6))

    def test_features_only_and_normalisation(self):
        L = cxt.UtteranceLoader(os.path.join(TMP, "test"), frame_budget=BUDGET, shuffle=False)
        batches = list(L)
        self.assertTrue(all(len(b) == 2 for b in batches))
        self.assertEqual(sum(len(b[1]) for b in batches), 5)
        train = ctxshard.open(os.path.join(TMP, "f32"))
        x, lengths = cxt.UtteranceDataset(os.path.join(TMP, "test"), normalize=train).__getitems__(
            [0, 1]).x, None
        test = ctxshard.open(os.path.join(TMP, "test"))
        f0, n0 = test.utterance_frames(0)
        g = test.gather(np.arange(f0, f0 + n0), 0, normalize=train)
        np.testing.assert_array_equal(x[0, :n0].numpy(), g)
        P = cxt.UtteranceLoader(os.path.join(TMP, "f32"), frame_budget=BUDGET, per_utterance=True)
        x, lengths, _ = next(iter(P))
        t = int(lengths[0])
        m = x[0, :t].double().mean(0)
        self.assertTrue(torch.allclose(m, torch.zeros_like(m), atol=1e-4))

    def test_bench_utt_command(self):
        import json
        p = os.path.join(TMP, "f32")
        r = subprocess.run([EXE, "bench-utt", p, "--frame-budget", str(BUDGET), "--threads", "2",
                            "--json"], check=True, capture_output=True, text=True)
        j = json.loads(r.stdout)
        self.assertEqual(j["utterances"], 40)
        b, rnd = j["bucketed"], j["random"]
        self.assertEqual(b["batches"], b["epoch_batches"])  # one epoch by default
        self.assertEqual(b["batches"], cxt.UtteranceBatchSampler(p, BUDGET).global_batches())
        self.assertEqual(rnd["epoch_batches"],
                         cxt.UtteranceBatchSampler(p, BUDGET, buckets=1).global_batches())
        self.assertLessEqual(b["padding_overhead"], rnd["padding_overhead"])
        self.assertGreaterEqual(b["padding_overhead"], 1.0)
        r = subprocess.run([EXE, "bench-utt", p], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("--frame-budget N is required", r.stderr)
        r = subprocess.run([EXE, "bench-utt", p, "--frame-budget", "100"], capture_output=True,
                           text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("longer than frame_budget 100", r.stderr)


def reference_targets(raw, utts, runs=False):
    """(targets [B, Lmax] padded with -100, lengths) from the raw transcripts:
    the symbols between [SOS] and [EOS] (runs=True: per-frame transcripts,
    every run of equal symbols once), as indices of reference.PHONEMES."""
    ids = reference.utterance_ids(raw)
    seqs = []
    for u in utts:
        t = [str(p) for p in np.load(os.path.join(raw, "transcript", ids[u] + ".npy"))[1:-1]]
        if runs:
            t = [p for i, p in enumerate(t) if i == 0 or p != t[i - 1]]
        seqs.append([reference.PHONEMES.index(p) for p in t])
    out = np.full((len(utts), max(map(len, seqs))), -100, np.int64)
    for i, q in enumerate(seqs):
        out[i, :len(q)] = q
    return out, np.array([len(q) for q in seqs])


class DeviceBatches(unittest.TestCase):
    """UtteranceLoader's device path (batches assembled from resident data by
    the library's GPU utterance loader), run in host emulation: the CPU
    path's batches, byte for byte, targets included."""

    def epoch(self, loader):
        out = []
        for b in loader:
            out.append(([t.clone() for t in b], dict(loader.batch_info)))
        return out

    def same(self, a, b):
        self.assertEqual(len(a), len(b))
        self.assertGreater(len(a), 1)
        for (ta, ia), (tb, ib) in zip(a, b):
            self.assertEqual(len(ta), len(tb))
            for u, v in zip(ta, tb):
                self.assertEqual(u.dtype, v.dtype)
                self.assertEqual(u.device, v.device)
                self.assertTrue(torch.equal(u, v))
            self.assertTrue(np.array_equal(ia["utterances"], ib["utterances"]))
            self.assertEqual((ia["global"], ia["index"], ia["frames"]),
                             (ib["global"], ib["index"], ib["frames"]))

    def test_equal_to_the_cpu_path(self):
        for name in ("both", "both16"):
            for rank, world in ((None, None), (0, 2), (1, 2)):
                kw = dict(seed=3, threads=2, rank=rank, world_size=world,
                          normalize=(name == "both16"))
                path = os.path.join(TMP, name)
                G = cxt.UtteranceLoader(path, BUDGET, gpu_emulate=True, **kw)
                C = cxt.UtteranceLoader(path, BUDGET, **kw)
                self.assertEqual(G.gpu_mode, "device")
                for _ in range(2):  # two epochs: the device loader is reset, not remade
                    g, c = self.epoch(G), self.epoch(C)
                    self.same(g, c)
                    self.assertEqual(len(g[0][0]), 5)  # x, lengths, y, targets, target_lengths
                self.assertEqual(G.epoch, 2)
                G.close()

    def test_resume_and_bfloat16(self):
        path = os.path.join(TMP, "both")
        G = cxt.UtteranceLoader(path, BUDGET, seed=5, gpu_emulate=True)
        C = cxt.UtteranceLoader(path, BUDGET, seed=5)
        it = iter(G)
        next(it)
        next(it)
        state = G.state_dict()
        R = cxt.UtteranceLoader(path, BUDGET, seed=5, gpu_emulate=True)
        RC = cxt.UtteranceLoader(path, BUDGET, seed=5)
        R.load_state_dict(state)
        RC.load_state_dict(state)
        rest = self.epoch(R)
        self.same(rest, self.epoch(RC))
        full = self.epoch(C)
        self.assertEqual([r[1]["global"] for r in rest], [f[1]["global"] for f in full[2:]])
        B = cxt.UtteranceLoader(path, BUDGET, seed=5, gpu_emulate=True, gpu_dtype=torch.bfloat16)
        gb = next(iter(B))
        self.assertEqual(gb[0].dtype, torch.bfloat16)
        ref = full[0][0][0]
        self.assertTrue(torch.equal(gb[0].float(), ref.to(torch.bfloat16).float()))

    def test_batch_outlives_its_loader(self):
        """A device batch holds the loader's buffers: taken from a loader
        nobody keeps, it still reads the batch (not freed memory)."""
        import gc
        path = os.path.join(TMP, "both")
        want = next(iter(cxt.UtteranceLoader(path, BUDGET, seed=6)))
        got = next(iter(cxt.UtteranceLoader(path, BUDGET, seed=6, gpu_emulate=True)))
        gc.collect()
        junk = [np.full(1 << 16, 7.0) for _ in range(64)]  # reuse any freed memory
        for a, b in zip(got, want):
            self.assertTrue(torch.equal(a, b))
        del junk

    def test_refusals_and_fallback(self):
        path = os.path.join(TMP, "both")
        with self.assertRaisesRegex(IndexError, "more than gpu_budget 1000: give a larger "
                                    "gpu_budget, or device=None"):
            next(iter(cxt.UtteranceLoader(path, BUDGET, gpu_emulate=True, gpu_budget=1000)))
        P = cxt.UtteranceLoader(path, BUDGET, gpu_emulate=True, per_utterance=True)
        self.assertEqual((P.gpu_mode, P.gpu_reason),
                         ("host", "per_utterance normalisation is computed on the CPU"))
        with self.assertRaisesRegex(ValueError, "gpu_dtype"):
            cxt.UtteranceLoader(path, BUDGET, gpu_dtype=torch.float16)
        if not torch.cuda.is_available():
            with self.assertWarnsRegex(UserWarning, "UtteranceLoader.*CPU"):
                L = cxt.UtteranceLoader(path, BUDGET, device="cuda")
            self.assertEqual(L.gpu_mode, "host")
            self.assertIsNone(L.device)
            self.assertEqual(next(iter(L))[0].device.type, "cpu")


class Targets(unittest.TestCase):
    """Label sequences as CTC targets in whole-utterance batches."""

    def check(self, batch, utts, raw, runs=False):
        t, tl = batch[-2], batch[-1]
        want, wl = reference_targets(raw, utts, runs)
        self.assertEqual(tl.tolist(), wl.tolist())
        self.assertTrue(np.array_equal(t.numpy(), want))

    def test_loader_serves_targets(self):
        for name, raw, runs in (("seq", SEQRAW, False), ("seqz", SEQRAW, False),
                                ("both", RAW, True)):
            p = os.path.join(TMP, name)
            seen = []
            for threads in (1, 3):
                L = cxt.UtteranceLoader(p, BUDGET, seed=2, threads=threads)
                for b in L:
                    utts = L.batch_info["utterances"].tolist()
                    # x, lengths, [y,] targets, target_lengths
                    self.assertEqual(len(b), 5 if name == "both" else 4)
                    self.check(b, utts, raw, runs)
                    if threads == 1:
                        seen += utts
            self.assertEqual(sorted(seen), list(range(ctxshard.open(p).num_utterances)))
            # targets=False: the batch without them
            b = next(iter(cxt.UtteranceLoader(p, BUDGET, targets=False)))
            self.assertEqual(len(b), 3 if name == "both" else 2)

    def test_dataset_and_collate(self):
        p = os.path.join(TMP, "seq")
        D = cxt.UtteranceDataset(p)
        item = D[4]
        self.assertEqual(item.fields, ("x", "target"))
        want, wl = reference_targets(SEQRAW, [4])
        self.assertEqual(item[1].tolist(), want[0, :wl[0]].tolist())
        # the library's batch (__getitems__) and pad_sequence over single items agree
        utts = [3, 0, 7, 5]
        whole = cxt.pad_collate(D.__getitems__(utts))
        single = cxt.pad_collate([D[u] for u in utts])
        self.assertEqual(len(whole), 4)
        for a, b in zip(whole, single):
            self.assertTrue(torch.equal(a, b))
        self.check(whole, utts, SEQRAW)
        sampler = cxt.UtteranceBatchSampler(p, frame_budget=BUDGET, seed=0)
        batches = list(sampler)  # epoch 0's; iterating moves on to epoch 1
        sampler.set_epoch(0)
        dl = torch.utils.data.DataLoader(D, batch_sampler=sampler, collate_fn=cxt.pad_collate)
        n = 0
        for (x, lengths, t, tl), utts in zip(dl, batches):
            self.check((t, tl), list(utts), SEQRAW)
            n += 1
        self.assertEqual(n, len(batches))

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "label sequences only"):
            cxt.UtteranceLoader(os.path.join(TMP, "seq"), BUDGET, labels=True)
        with self.assertRaisesRegex(ValueError, "no label sequences"):
            cxt.UtteranceLoader(os.path.join(TMP, "f32"), BUDGET, targets=True)
        with self.assertRaisesRegex(ValueError, "no label sequences"):
            cxt.UtteranceDataset(os.path.join(TMP, "f32"), targets=True)
        from ctxshard.utterances import pad_targets
        with self.assertRaisesRegex(ValueError, "no label sequences"):
            pad_targets(os.path.join(TMP, "f32"), [0])
        # a frame loader over a dataset of sequences only: features, no
        # labels, asked by labels=False (it yields (x, y) otherwise: refused)
        with self.assertRaisesRegex(ValueError, "label sequences only, no per-frame labels.*"
                                    "pass labels=False"):
            cxt.Loader(os.path.join(TMP, "seq"), 2, 64, shuffle=False)
        x = next(iter(cxt.Loader(os.path.join(TMP, "seq"), 2, 64, shuffle=False, labels=False)))
        self.assertEqual(tuple(x.shape), (64, 50))

    def test_items_pickle_and_plain_tuples(self):
        """Utterance items survive pickle and copy (DataLoader workers send
        them); pad_collate pads plain (x, y, target) tuples as such."""
        import copy
        import pickle
        D = cxt.UtteranceDataset(os.path.join(TMP, "both"))
        item = D[2]
        self.assertEqual(item.fields, ("x", "y", "target"))
        for back in (pickle.loads(pickle.dumps(item)), copy.copy(item)):
            self.assertEqual(back.fields, item.fields)
            for a, b in zip(back, item):
                self.assertTrue(torch.equal(a, b))
        utts = [2, 5]
        want = cxt.pad_collate(D.__getitems__(utts))
        plain = cxt.pad_collate([tuple(D[u]) for u in utts])
        self.assertEqual(len(plain), 5)
        for a, b in zip(want, plain):
            self.assertTrue(torch.equal(a, b))
        with self.assertRaisesRegex(TypeError, "4 parts"):
            cxt.pad_collate([(1, 2, 3, 4)])

    def test_sequences_only_frame_paths(self):
        """A dataset of sequences only has no frame labels: the frame loaders
        default to none and say why when asked."""
        from ctxshard import gpu
        p = os.path.join(TMP, "seq")
        ds = ctxshard.open(p)
        with self.assertRaisesRegex(ValueError, "label sequences only"):
            cxt.Loader(p, 2, 64, weighted=True)
        L = gpu.GpuLoader(ds, ctxshard.Sampler(ds), 2, 64, device=gpu.EMULATE)
        try:
            b = L.next()
            self.assertEqual(b.n, 64)
            self.assertIsNone(b.y)  # no labels: none asked, none made
        finally:
            L.close()
        with self.assertRaisesRegex(ValueError, "label sequences only"):
            gpu.GpuLoader(ds, ctxshard.Sampler(ds), 2, 64, device=gpu.EMULATE, labels=True)

    def test_example_learns(self):
        """examples/train_ctc.py: the CTC loss falls and the dev PER with it."""
        import re
        out = subprocess.run(
            [sys.executable, os.path.join(SRC, "examples", "train_ctc.py"), "--synth",
             "--train-utts", "60", "--dev-utts", "8", "--epochs", "3", "--hidden", "64"],
            check=True, capture_output=True, text=True,
            env=dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))).stdout
        loss = [float(v) for v in re.findall(r"CTC loss ([\d.]+)", out)]
        per = [float(v) for v in re.findall(r"dev PER ([\d.]+)%", out)]
        self.assertEqual(len(loss), 3, out)
        self.assertLess(loss[-1], loss[0] * 0.8, out)
        self.assertLess(per[-1], 100.0, out)
        # a dataset with frame labels and sequences (--transcripts both) trains too
        both = os.path.join(TMP, "both")
        out = subprocess.run(
            [sys.executable, os.path.join(SRC, "examples", "train_ctc.py"), "--train", both,
             "--dev", both, "--epochs", "1", "--hidden", "32"],
            check=True, capture_output=True, text=True,
            env=dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))).stdout
        self.assertIn("dev PER", out)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
