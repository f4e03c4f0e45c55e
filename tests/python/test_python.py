"""The Python package: the binding against the C reader (via the CLI's
gather) and an independent numpy reference; views outliving close; errors;
FrameDataset inside torch's DataLoader; the native Loader's epochs, resume,
ranks; the example's training run.

usage: /usr/bin/python3 tests/python/test_python.py BUILD_DIR SOURCE_ROOT
       PYTHON tests/python/test_python.py --installed SOURCE_ROOT
The second form tests the package pip installed into PYTHON's environment
(scripts/test-installed.sh): imported from there, the command from its bin."""
import gc
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import sysconfig  # noqa: E402

INSTALLED = sys.argv[1] == "--installed"
if INSTALLED:
    SRC = os.path.abspath(sys.argv[2])
    EXE = os.path.join(sysconfig.get_path("scripts"), "ctxshard")
else:
    BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    EXE = os.path.join(BUILD, "tools", "ctxshard")
    os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
    sys.path.insert(0, os.path.join(SRC, "python"))
sys.path.insert(0, os.path.join(SRC, "tests", "roundtrip"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402
import reference  # noqa: E402

try:
    import torch  # noqa: E402
    import ctxshard.torch as cxt  # noqa: E402
except ImportError:  # torch is optional; its tests are skipped without it
    torch = None

TMP = tempfile.mkdtemp(prefix="ctxshard-py-")


def run(*args):
    subprocess.run([EXE, *map(str, args)], check=True, stdout=subprocess.DEVNULL)


def setUpModule():
    raw = os.path.join(TMP, "raw")
    run("synth", raw, "--utts", 12, "--seed", 4, "--quiet")
    for dt in ("f32", "f16", "bf16"):
        run("pack", raw, os.path.join(TMP, dt), "--dtype", dt, "--guard", 16, "--shard-size",
            "600K", "--quiet")


def tearDownModule():
    shutil.rmtree(TMP)


class Binding(unittest.TestCase):
    def setUp(self):
        self.raw = os.path.join(TMP, "raw")
        self.ds = ctxshard.open(os.path.join(TMP, "f32"))

    def tearDown(self):
        self.ds.close()

    def test_description(self):
        ds = self.ds
        ids, utts = reference.dataset(self.raw)
        self.assertEqual(len(ds), sum(len(f) for f, _ in utts))
        self.assertEqual(ds.num_utterances, len(ids))
        self.assertEqual(ds.ids, ids)
        self.assertEqual((ds.dim, ds.guard, ds.dtype), (28, 16, "float32"))
        self.assertGreater(ds.num_shards, 1)
        self.assertEqual(ds.vocab, reference.PHONEMES)
        self.assertEqual(ds.input_size(30), 61 * 28)
        allf = np.concatenate([f for f, _ in utts]).astype(np.float64)
        st = ds.stats
        self.assertTrue(np.allclose(st.mean, allf.mean(0), rtol=1e-12, atol=1e-12))
        self.assertTrue(np.allclose(st.var, allf.var(0), rtol=1e-9))
        labels = np.concatenate([l for _, l in utts])
        self.assertEqual(st.label_counts.tolist(), np.bincount(labels, minlength=42).tolist())
        self.assertTrue(np.array_equal(ds.labels, labels))
        ds.verify()

    def test_windows_utterances_and_gather_match_reference(self):
        for dt in ("f32", "f16", "bf16"):
            with ctxshard.open(os.path.join(TMP, dt)) as ds:
                _, utts = reference.dataset(self.raw, dt)
                frame = 0
                for u, (feats, labels) in enumerate(utts):
                    uid, fv, lv = ds.utterance(u)
                    want = feats if dt != "bf16" else feats.view(np.uint32) >> 16
                    got = fv.astype(np.float32) if dt != "bf16" else fv
                    self.assertTrue(np.array_equal(got, want), (dt, u))
                    self.assertTrue(np.array_equal(lv, labels))
                    self.assertEqual(ds.utterance_frames(u), (frame, len(feats)))
                    frame += len(feats)
                ref = np.concatenate([reference.windows(f, 16) for f, _ in utts])
                for i in (0, 1, 500, frame - 1):
                    w = ds.window(i, 16)
                    self.assertEqual(w.shape, (33, 28))
                    w32 = w.astype(np.float32) if dt != "bf16" else \
                        (w.astype(np.uint32) << 16).view(np.float32)
                    self.assertTrue(np.array_equal(w32.reshape(-1), ref[i]))
                for k in (0, 3, 16, 40):
                    ref = np.concatenate([reference.windows(f, k) for f, _ in utts])
                    idx = np.random.default_rng(k).integers(0, len(ds), 700)
                    x, y = ds.gather(idx, k, labels=True)
                    self.assertTrue(np.array_equal(x.view(np.uint32), ref[idx].view(np.uint32)))
                    self.assertTrue(np.array_equal(y, np.concatenate([l for _, l in utts])[idx]))
                    out = np.empty_like(x)
                    self.assertIs(ds.gather(idx, k, out=out, threads=3), out)
                    self.assertTrue(np.array_equal(out, x))

    def test_hugepage_budget(self):
        """Served from the copy in huge pages: the same windows and gathers
        (k <= guard and k > guard) as from the mapping, for every dtype; a
        pickled dataset reopens with its copy; a budget too small says
        why.  (The loader: Torch.test_loader_hugepage_budget.)"""
        for dt in ("f32", "f16", "bf16"):
            p = os.path.join(TMP, dt)
            with ctxshard.open(p) as plain, ctxshard.open(p, hugepage_budget="1G") as ds:
                hp = ds.hugepages
                self.assertEqual(plain.hugepages, {"bytes": 0, "huge_bytes": 0, "reason": ""})
                if hp["bytes"]:
                    self.assertEqual(hp["reason"], "")
                else:  # no transparent huge pages here: the fallback, said
                    self.assertIn("huge pages", hp["reason"])
                for i in (0, 1, 500, len(ds) - 1):
                    self.assertTrue(np.array_equal(ds.window(i, 16), plain.window(i, 16)))
                idx = np.random.default_rng(5).integers(0, len(ds), 900)
                for k in (3, 16, 40):
                    x, y = ds.gather(idx, k, labels=True)
                    x0, y0 = plain.gather(idx, k, labels=True)
                    self.assertTrue(np.array_equal(x.view(np.uint32), x0.view(np.uint32)), (dt, k))
                    self.assertTrue(np.array_equal(y, y0))
                self.assertEqual(pickle.loads(pickle.dumps(ds)).hugepages["bytes"], hp["bytes"])
        with ctxshard.open(os.path.join(TMP, "f32"), hugepage_budget=4096) as ds:
            self.assertEqual(ds.hugepages["bytes"], 0)
            self.assertIn("the budget is 4096", ds.hugepages["reason"])
        with self.assertRaises(ValueError):
            ctxshard.open(os.path.join(TMP, "f32"), hugepage_budget=-1)

    def test_gather_matches_cli(self):
        xpath = os.path.join(TMP, "cli-x.npy")
        run("gather", os.path.join(TMP, "f32"), "--context", 7, "--frames", "0-99,4000,17",
            "--out", xpath, "--normalize")
        frames = list(range(100)) + [4000, 17]
        self.assertTrue(np.array_equal(np.load(xpath), self.ds.gather(frames, 7, normalize=True)))

    def test_gather_stats_from_cli(self):
        """ctxshard gather --stats-from TRAIN: dev normalised with train's
        statistics, the same bytes as Dataset.gather(normalize=train); a
        dataset of another dimension is refused, naming both."""
        dev_raw, dev = os.path.join(TMP, "raw-dev5"), os.path.join(TMP, "dev5")
        run("synth", dev_raw, "--utts", 2, "--seed", 11, "--offset", 50, "--quiet")
        run("pack", dev_raw, dev, "--quiet")
        xpath = os.path.join(TMP, "cli-dev.npy")
        train = os.path.join(TMP, "f32")
        p = subprocess.run([EXE, "gather", dev, "--context", "4", "--all", "--out", xpath,
                            "--stats-from", train], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"normalised with the statistics of {train}", p.stdout)
        with ctxshard.open(dev) as d:
            want = d.gather(range(len(d)), 4, normalize=self.ds)
            self.assertTrue(np.array_equal(np.load(xpath).view(np.uint32), want.view(np.uint32)))
            self.assertFalse(np.array_equal(want, d.gather(range(len(d)), 4, normalize=d)))
        narrow_raw, narrow = os.path.join(TMP, "raw-dim5"), os.path.join(TMP, "dim5")
        run("synth", narrow_raw, "--utts", 2, "--dim", 5, "--quiet")
        run("pack", narrow_raw, narrow, "--quiet")
        p = subprocess.run([EXE, "gather", dev, "--context", "1", "--frames", "0", "--out", xpath,
                            "--stats-from", narrow], capture_output=True, text=True)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(f"{narrow}: statistics of 5 dimensions, but {dev} has 28", p.stderr)
        self.assertIn("same features", p.stderr)
        with ctxshard.open(narrow) as n5, self.assertRaisesRegex(ValueError, "dim 28"):
            self.ds.gather([0], 1, normalize=n5)

    def test_normalization_warnings_and_mismatch(self):
        """normalize=True warns once per dataset (train, then dev: two
        warnings, each naming its dataset); `gather --normalize` without
        --stats-from warns the same; statistics of a split packed with
        --normalize utterance are refused for one packed without it (and
        the other way round), in Python and in the command."""
        import warnings
        dev_raw, dev = os.path.join(TMP, "raw-dev6"), os.path.join(TMP, "dev6")
        utt = os.path.join(TMP, "train-utt")
        run("synth", dev_raw, "--utts", 2, "--seed", 12, "--offset", 60, "--quiet")
        run("pack", dev_raw, dev, "--quiet")
        run("pack", os.path.join(TMP, "raw"), utt, "--normalize", "utterance", "--quiet")
        train = os.path.join(TMP, "f32")
        ctxshard._warned_own_stats.clear()
        with warnings.catch_warnings(record=True) as w, ctxshard.open(dev) as d, \
                ctxshard.open(train) as t:
            warnings.simplefilter("always")
            t.gather([0], 1, normalize=True)
            d.gather([0], 1, normalize=True)
            d.gather([1], 1, normalize=True)
            msgs = [str(m.message) for m in w if "own statistics" in str(m.message)]
            self.assertEqual(len(msgs), 2, msgs)
            self.assertIn(train, msgs[0])
            self.assertIn(dev, msgs[1])
        xpath = os.path.join(TMP, "cli-dev6.npy")
        p = subprocess.run([EXE, "gather", dev, "--context", "1", "--frames", "0", "--out", xpath,
                            "--normalize"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"{dev}: --normalize without --stats-from normalises by its own "
                      "statistics", p.stderr)
        self.assertIn("--stats-from TRAIN_OUT", p.stderr)
        p = subprocess.run([EXE, "gather", dev, "--context", "1", "--frames", "0", "--out", xpath,
                            "--stats-from", dev], capture_output=True, text=True)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        for a, b in ((dev, utt), (utt, dev)):
            p = subprocess.run([EXE, "gather", a, "--context", "1", "--frames", "0", "--out",
                                xpath, "--stats-from", b], capture_output=True, text=True)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--normalize utterance", p.stderr)
            self.assertIn(b, p.stderr)
        with ctxshard.open(dev) as d, ctxshard.open(utt) as u:
            for nrm in (u, u.stats):
                with self.assertRaisesRegex(ValueError, "packed with --normalize utterance"):
                    d.gather([0], 1, normalize=nrm)
                with self.assertRaisesRegex(ValueError, "packed with --normalize utterance"):
                    cxt.FrameDataset(dev, 1, normalize=nrm)
            with self.assertRaisesRegex(ValueError, "packed with --normalize utterance"):
                u.gather([0], 1, normalize=d)

    def test_normalize_is_the_spec(self):
        """gather(normalize=...) and the GPU kernel's arithmetic (host
        emulation, resident mode) against an independent numpy reading of
        spec/format.md section 7.4, bit for bit, for every dtype and a k
        beyond the guard; and with another dataset's statistics."""
        import ctypes
        import ctxshard.gpu as g

        def spec(windows, mask, mean, var):
            s = 1.0 / np.sqrt(np.where(var > 0, var, 1.0))  # spec §7.4
            D = mean.size
            x = windows.reshape(len(windows), -1, D).astype(np.float64)
            y = ((x - mean) * s).astype(np.float32)
            return np.where(mask.reshape(y.shape), y, np.float32(0)).reshape(windows.shape)

        for dt in ("f32", "f16", "bf16"):
            with ctxshard.open(os.path.join(TMP, dt)) as ds, \
                    ctxshard.open(os.path.join(TMP, "f32")) as other:
                _, utts = reference.dataset(self.raw, dt)
                st, ost = ds.stats, other.stats
                for k in (0, 3, 20):
                    ref = np.concatenate([reference.windows(f, k) for f, _ in utts])
                    mask = np.concatenate([reference.windows(np.ones_like(f), k)
                                           for f, _ in utts]) != 0
                    idx = np.random.default_rng(k).integers(0, len(ds), 500)
                    want = spec(ref[idx], mask[idx], st.mean, st.var)
                    got = ds.gather(idx, k, normalize=True)
                    self.assertTrue(np.array_equal(got.view(np.uint32), want.view(np.uint32)),
                                    (dt, k, int((got != want).sum())))
                    want_o = spec(ref[idx], mask[idx], ost.mean, ost.var)
                    for norm in (other, (ost.mean, ost.var)):
                        got = ds.gather(idx, k, normalize=norm)
                        self.assertTrue(np.array_equal(got.view(np.uint32),
                                                       want_o.view(np.uint32)), (dt, k))
                # The GPU expansion (gpu_expand.h), emulated on the host.
                k = 20
                ref = np.concatenate([reference.windows(f, k) for f, _ in utts])
                mask = np.concatenate([reference.windows(np.ones_like(f), k)
                                       for f, _ in utts]) != 0
                s = ctxshard.Sampler(ds, ctxshard.SHUFFLE, seed=3)
                with g.GpuLoader(ds, s, k, 128, device=g.EMULATE, mode="resident",
                                 normalize=True) as L:
                    b = L.next()
                    g.emulated_sync()  # the host reads it: after the device's work
                    x = np.ctypeslib.as_array(ctypes.cast(b.x, ctypes.POINTER(ctypes.c_float)),
                                              shape=(b.n, ds.input_size(k))).copy()
                    fr = np.asarray(b.frames)
                    want = spec(ref[fr], mask[fr], st.mean, st.var)
                    self.assertTrue(np.array_equal(x.view(np.uint32), want.view(np.uint32)), dt)
        with self.assertRaises(ValueError):
            self.ds.gather([0], 2, normalize=(np.zeros(3), np.ones(3)))
        with self.assertRaises(ValueError):
            self.ds.gather([0], 2, normalize=(np.zeros(28), -np.ones(28)))

    def test_views_survive_close(self):
        ds = ctxshard.open(os.path.join(TMP, "f32"))
        w = ds.window(10, 5)
        _, f, l = ds.utterance(3)
        st = ds.stats
        before = (w.copy(), f.copy(), l.copy(), st.mean.copy())
        ds.close()
        del ds
        gc.collect()
        self.assertTrue(np.array_equal(w, before[0]))
        self.assertTrue(np.array_equal(f, before[1]))
        self.assertTrue(np.array_equal(l, before[2]))
        self.assertTrue(np.array_equal(st.mean, before[3]))
        self.assertFalse(w.flags.writeable)
        with self.assertRaises(ValueError):
            w[0, 0] = 1

    def test_errors(self):
        ds = self.ds
        with self.assertRaises(IndexError):
            ds.window(len(ds), 1)
        with self.assertRaises(ValueError):
            ds.window(0, ds.guard + 1)
        with self.assertRaises(IndexError):
            ds.gather([0, len(ds)], 2)
        with self.assertRaises(IndexError):
            ds.gather([-1], 2)
        with self.assertRaises(ValueError):
            ds.gather([0], 2, out=np.empty((1, 5), np.float32))
        with self.assertRaises(IndexError):
            ds.utterance(ds.num_utterances)
        with self.assertRaises(OSError):
            ctxshard.open(os.path.join(TMP, "nope"))
        self.assertEqual(ds.gather([], 3).shape, (0, 7 * 28))
        broken = os.path.join(TMP, "broken")
        shutil.copytree(os.path.join(TMP, "f32"), broken)
        p = os.path.join(broken, "manifest.cxs")
        data = bytearray(open(p, "rb").read())
        data[5000] ^= 1  # padding after DATASET_META: only verify reads it
        open(p, "wb").write(bytes(data))
        with ctxshard.open(broken) as b:
            with self.assertRaises(ctxshard.CtxshardError) as cm:
                b.verify()
            self.assertIn("padding", str(cm.exception))
        data[4100] ^= 1  # inside DATASET_META: open refuses
        open(p, "wb").write(bytes(data))
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ctxshard.open(broken)
        self.assertIn("manifest.cxs", str(cm.exception))
        self.assertEqual(cm.exception.code, -5005)
        ds.close()
        with self.assertRaises(ValueError):
            ds.gather([0], 1)

    def test_native_diagnostics(self):
        """What the C library says about a refused argument reaches the
        exception (the package checks most arguments itself first; these
        are the library's own words, through the declarations the package
        uses)."""
        import ctypes
        from ctxshard import _native as n
        ds, d = self.ds, n.Diag()
        f = np.array([0, len(ds) + 5], dtype=np.uint64)
        out = np.empty((2, 3 * ds.dim), np.float32)
        rc = n.lib.cxs_dataset_gather_ex(ds._ptr, f.ctypes.data, 2, 1, 0, None, 1,
                                         out.ctypes.data, None, ctypes.byref(d))
        self.assertEqual(rc, n.E_RANGE)
        with self.assertRaises(IndexError) as cm:
            ctxshard._raise(rc, d, what="gather")
        self.assertIn(f"gather: frame {len(ds) + 5} (item 1) is past", str(cm.exception))
        s = ctxshard.Sampler(ds, ctxshard.SEQUENTIAL)
        opts, ptr = n.LoaderOpts(1, 0, 1), ctypes.c_void_p()  # batch_size 0
        rc = n.lib.cxs_loader_create_ex(ds._ptr, s._ptr, ctypes.byref(opts), 0, 0,
                                        ctypes.byref(ptr), ctypes.byref(d))
        self.assertEqual(rc, n.E_INVALID)
        with self.assertRaises(ValueError) as cm:
            ctxshard._raise(rc, d, what="loader")
        self.assertEqual(str(cm.exception), "loader: batch_size must be at least 1")

    def test_sampler(self):
        s = ctxshard.Sampler(self.ds, ctxshard.SHUFFLE, seed=3)
        a = s.get(0)
        self.assertEqual(sorted(a.tolist()), list(range(len(self.ds))))
        self.assertFalse(np.array_equal(a, s.get(1)))
        self.assertTrue(np.array_equal(a[100:200], s.get(0, 100, 100)))


class Gpu(unittest.TestCase):
    """ctxshard.gpu through ctypes, emulated on the host (every struct and
    pointer crosses the binding as it would with a device)."""

    def setUp(self):
        self.ds = ctxshard.open(os.path.join(TMP, "f16"))

    def tearDown(self):
        self.ds.close()

    def host(self, ptr, shape, ctype):
        import ctypes
        return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctype)), shape=shape).copy()

    def test_probe(self):
        import ctxshard.gpu as g
        p = g.probe(0)
        if not p["usable"]:
            self.assertTrue(p["reason"])
        e = g.probe(g.EMULATE)
        self.assertTrue(e["usable"] and e["free_bytes"] > 0)

    def test_every_mode_matches_gather(self):
        import ctypes
        import ctxshard.gpu as g
        s = ctxshard.Sampler(self.ds, ctxshard.SHUFFLE, seed=8)
        k, W = 20, self.ds.input_size(20)  # wider than the guard (16)
        for mode in ("resident", "stream", "pool"):
            # pool: the batch ring and 4 segments of 3 longest utterances
            info = self.ds.info
            budget = (3 * 97 * (W * 4 + 8 + 24) + 4 * 3 * info["max_length"] * info["dim"] * 2
                      if mode == "pool" else None)
            with g.GpuLoader(self.ds, s, k, 97, device=g.EMULATE, mode=mode, budget=budget,
                             normalize=True, epoch=2) as L:
                self.assertEqual(L.info()["mode"], mode)
                seen = []
                while True:
                    b = L.next()
                    if b is None:
                        break
                    g.emulated_sync()  # the host reads it: after the device's work
                    x = self.host(b.x, (b.n, W), ctypes.c_float)
                    y = self.host(b.y, (b.n,), ctypes.c_int64)
                    rx, ry = self.ds.gather(b.frames, k, normalize=True, labels=True)
                    self.assertTrue(np.array_equal(x, rx) and np.array_equal(y, ry), mode)
                    seen.append(b.frames)
                seen = np.concatenate(seen)
                self.assertEqual(sorted(seen.tolist()), list(range(len(self.ds))))
                if mode != "pool":
                    self.assertTrue(np.array_equal(seen, s.get(2)))
        with self.assertRaises(ValueError):
            g.GpuLoader(self.ds, s, 4, 8, device=g.EMULATE, mode="stream", out_dtype="bfloat16")
        with self.assertRaises(IndexError) as cm:
            g.GpuLoader(self.ds, s, 4, 8, device=g.EMULATE, mode="resident", budget=1000)
        self.assertIn("resident mode needs", str(cm.exception))


@unittest.skipIf(torch is None, "torch is not installed")
class Torch(unittest.TestCase):
    path = None

    @classmethod
    def setUpClass(cls):
        cls.path = os.path.join(TMP, "f32")
        cls.ds = ctxshard.open(cls.path)

    def test_frame_dataset_in_dataloader(self):
        fd = cxt.FrameDataset(self.path, 4)
        self.assertEqual(len(fd), len(self.ds))
        self.assertEqual(fd.input_size, 9 * 28)
        x, y = fd[123]
        wx, wy = self.ds.gather([123], 4, labels=True)
        self.assertTrue(torch.equal(x, torch.from_numpy(wx[0])) and int(y) == int(wy[0]))
        for workers in (0, 2):
            for collate in (None, cxt.collate):
                dl = torch.utils.data.DataLoader(
                    fd, batch_size=256, shuffle=True, num_workers=workers,
                    generator=torch.Generator().manual_seed(1),
                    **({"collate_fn": collate} if collate else {}))
                seen = 0
                for i, (xb, yb) in enumerate(dl):
                    self.assertEqual(xb.shape[1], 9 * 28)
                    if i < 3:  # compare a few batches with the reader directly
                        pass
                    seen += len(yb)
                self.assertEqual(seen, len(fd))
            # exact content through a sequential sampler
            dl = torch.utils.data.DataLoader(fd, batch_size=300, num_workers=workers,
                                             collate_fn=cxt.collate)
            xb, yb = next(iter(dl))
            wx, wy = self.ds.gather(range(300), 4, labels=True)
            self.assertTrue(torch.equal(xb, torch.from_numpy(wx)))
            self.assertTrue(torch.equal(yb, torch.from_numpy(wy)))

    def test_reopen_by_path_checks_identity(self):
        """A FrameDataset or UtteranceDataset pickled (as DataLoader sends
        it to a worker) and reopened by path after the dataset was packed
        again there is refused, naming the path; unchanged, it serves the
        same rows, and a copy of the dataset has the same identity."""
        import pickle
        raw2 = os.path.join(TMP, "raw-repack")
        run("synth", raw2, "--utts", 3, "--seed", 11, "--quiet")
        path = os.path.join(TMP, "repacked")
        run("pack", os.path.join(TMP, "raw"), path, "--quiet")
        ident = ctxshard.open(path).identity
        self.assertIsInstance(ident, int)
        self.assertEqual(ctxshard.open(os.path.join(TMP, "f32")).identity,
                         ctxshard.open(os.path.join(TMP, "f32")).identity)
        self.assertNotEqual(ident, ctxshard.open(os.path.join(TMP, "f32")).identity)
        fd = cxt.FrameDataset(path, 2, normalize=True)
        ud = cxt.UtteranceDataset(path)
        n = len(fd)
        want = fd[n - 1][0]
        same = pickle.loads(pickle.dumps(fd))
        self.assertTrue(torch.equal(same[n - 1][0], want))
        blobs = [pickle.dumps(fd), pickle.dumps(ud)]
        run("pack", raw2, path, "--quiet")  # packed again at the same path
        self.assertNotEqual(ctxshard.open(path).identity, ident)
        for blob, name in zip(blobs, ("FrameDataset", "UtteranceDataset")):
            back = pickle.loads(blob)
            with self.assertRaisesRegex(ctxshard.CtxshardError,
                                        f"{name}: {re.escape(path)} is not the dataset this "
                                        "object was made from .*packed again"):
                back[0]
        # the original object, whose dataset is still open, is unaffected
        self.assertTrue(torch.equal(fd[n - 1][0], want))

    def test_incomplete_test_split_warns(self):
        """A features-only split that lost utterances at pack time warns,
        naming the count and the ids, in FrameDataset, UtteranceDataset,
        Loader, UtteranceLoader and ctxshard.pack (once per dataset);
        ds.incomplete says it; pack(fill_nonfinite=True) keeps every frame
        and gives the command's bytes."""
        import warnings
        raw = os.path.join(TMP, "raw-test-nan")
        run("synth", raw, "--utts", 3, "--seed", 13, "--no-transcripts", "--quiet")
        names = sorted(os.listdir(os.path.join(raw, "mfcc")))
        p = os.path.join(raw, "mfcc", names[1])
        x = np.load(p)
        x[0, 0] = np.nan
        np.save(p, x)
        bad = names[1][:-4]
        out = os.path.join(TMP, "test-nan")
        ctxshard._warned_incomplete.clear()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ctxshard.pack(raw, out, on_error="skip")
        msgs = [str(m.message) for m in w if "features-only split" in str(m.message)]
        self.assertEqual(len(msgs), 1, [str(m.message) for m in w])
        self.assertIn("1 utterance left out", msgs[0])
        self.assertIn(bad, msgs[0])
        with ctxshard.open(out) as ds:
            self.assertTrue(ds.incomplete)
            self.assertEqual(ds.num_skipped, 1)
        makers = [lambda: cxt.FrameDataset(out, 2), lambda: cxt.UtteranceDataset(out),
                  lambda: cxt.Loader(out, 2, 64, labels=False),
                  lambda: cxt.UtteranceLoader(out, frame_budget=20000)]
        for make in makers:
            ctxshard._warned_incomplete.clear()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                make()
                make()  # once per dataset
            msgs = [str(m.message) for m in w if "features-only split" in str(m.message)]
            self.assertEqual(len(msgs), 1, msgs)
            self.assertIn(f"{out} is a features-only split (a test split?) with 1 utterance "
                          f"left out at pack time ({bad}): predictions", msgs[0])
        with ctxshard.open(self.path) as ds:
            self.assertFalse(ds.incomplete)
        fill = os.path.join(TMP, "test-fill")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            done = ctxshard.pack(raw, fill, fill_nonfinite=True)
        self.assertEqual(done["zero_filled"], {bad: 1})
        self.assertTrue(any("zero-filled 1 NaN" in str(m.message) for m in w))
        cli = os.path.join(TMP, "test-fill-cli")
        subprocess.run([EXE, "pack", raw, cli, "--fill-nonfinite", "--quiet"], check=True,
                       capture_output=True)
        with ctxshard.open(fill) as a, ctxshard.open(cli) as b:
            self.assertFalse(a.incomplete)
            self.assertEqual(len(a), sum(np.load(os.path.join(raw, "mfcc", n)).shape[0]
                                         for n in names))
            self.assertTrue(np.array_equal(a.gather(range(len(a)), 1),
                                           b.gather(range(len(b)), 1)))
            self.assertEqual(a.identity, b.identity)  # the same bytes

    def test_features_only(self):
        raw = os.path.join(TMP, "raw-test")
        out = os.path.join(TMP, "test-split")
        run("synth", raw, "--utts", 2, "--seed", 8, "--no-transcripts", "--quiet")
        run("pack", raw, out, "--quiet")
        fd = cxt.FrameDataset(out, 2)
        x = fd[3]
        self.assertEqual(tuple(x.shape), (5 * 28,))
        dl = torch.utils.data.DataLoader(fd, batch_size=64)
        xb = next(iter(dl))
        self.assertEqual(tuple(xb.shape), (64, 5 * 28))
        want = torch.from_numpy(ctxshard.open(out).gather(range(len(fd)), 2))
        # one shape per call: (x, y) unless labels=False is asked, so a
        # dataset without labels needs labels=False, said by name
        with self.assertRaisesRegex(ValueError, f"Loader: {out} has no labels \\(features "
                                    r"only, like a test split\), and batches are \(x, y\) unless "
                                    "labels=False is asked: pass labels=False"):
            cxt.Loader(out, 2, 100, shuffle=False)
        with self.assertRaisesRegex(ValueError, "labels=True, but .* has no labels"):
            cxt.Loader(out, 2, 100, shuffle=False, labels=True)
        L = cxt.Loader(out, 2, 100, shuffle=False, labels=False)
        self.assertFalse(L.labels)
        batches = list(L)
        self.assertTrue(all(isinstance(b, torch.Tensor) for b in batches))
        self.assertTrue(torch.equal(torch.cat(batches), want))
        # a labelled dataset: pairs by default and with labels=True, x alone
        # with labels=False
        for kw, pair in (({}, True), ({"labels": True}, True), ({"labels": False}, False)):
            b = next(iter(cxt.Loader(self.path, 2, 2, shuffle=False, **kw)))
            self.assertEqual(isinstance(b, tuple) and len(b) == 2, pair, kw)
            self.assertEqual(isinstance(b, torch.Tensor), not pair, kw)
        import ctxshard.gpu as g
        with ctxshard.open(out) as t:
            with g.GpuLoader(t, ctxshard.Sampler(t, ctxshard.SEQUENTIAL), 2, 100,
                             device=g.EMULATE, mode="resident") as G:
                self.assertIsNone(G.next().y)
        L = cxt.Loader(out, 2, 100, shuffle=False, gpu_emulate=True, labels=False)
        self.assertTrue(torch.equal(torch.cat([x.clone() for x in L]), want))
        self.assertTrue(cxt.Loader(self.path, 2, 100).labels)

    def test_normalize_with_train_statistics(self):
        """Dev normalised with train's statistics, the same windows through
        gather, FrameDataset, the Loader and the (emulated) GPU loader,
        whichever form the statistics take; normalize=True warns once per
        dataset."""
        import warnings
        import ctxshard.gpu as g
        raw = os.path.join(TMP, "raw-dev")
        dev_path = os.path.join(TMP, "dev-split")
        if not os.path.exists(dev_path):
            run("synth", raw, "--utts", 3, "--seed", 9, "--offset", 100, "--quiet")
            run("pack", raw, dev_path, "--quiet")
        train = self.ds
        with ctxshard.open(dev_path) as dev:
            n, k = len(dev), 3
            want = dev.gather(range(n), k, normalize=train)
            st = train.stats
            self.assertTrue(np.array_equal(want, dev.gather(range(n), k,
                                                            normalize=(st.mean, st.var))))
            own = dev.gather(range(n), k, normalize=dev)
            self.assertFalse(np.array_equal(want, own))  # the statistics matter
            for nrm in (train, st, (st.mean, st.var)):
                fd = cxt.FrameDataset(dev_path, k, normalize=nrm)
                x, _ = fd[list(range(n))]
                self.assertTrue(np.array_equal(x.numpy(), want))
                L = cxt.Loader(dev_path, k, 97, shuffle=False, normalize=nrm)
                self.assertTrue(np.array_equal(torch.cat([x for x, _ in L]).numpy(), want))
                E = cxt.Loader(dev_path, k, 97, shuffle=False, normalize=nrm, gpu_emulate=True)
                self.assertTrue(np.array_equal(torch.cat([x.clone() for x, _ in E]).numpy(),
                                               want))
                with g.GpuLoader(dev, ctxshard.Sampler(dev, ctxshard.SEQUENTIAL), k, n,
                                 device=g.EMULATE, mode="stream", normalize=nrm) as G:
                    b = G.next()
                    g.emulated_sync()  # the host reads it: after the device's work
                    import ctypes
                    gx = np.ctypeslib.as_array(ctypes.cast(b.x, ctypes.POINTER(ctypes.c_float)),
                                               shape=(b.n, dev.input_size(k)))
                    self.assertTrue(np.array_equal(gx, want))
            # True: the dataset's own, with one warning per dataset naming the fix;
            # the dataset itself: the same windows, no warning
            ctxshard._warned_own_stats.clear()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                a = dev.gather(range(n), k, normalize=True)
                cxt.Loader(dev_path, k, 97, normalize=True)
                cxt.FrameDataset(dev_path, k, normalize=True)
            self.assertTrue(np.array_equal(a, own))
            msgs = [str(m.message) for m in w if "own statistics" in str(m.message)]
            self.assertEqual(len(msgs), 1, msgs)
            self.assertIn("normalize=train_ds", msgs[0])
            self.assertIn("normalize=ds", msgs[0])
            ctxshard._warned_own_stats.clear()
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                dev.gather(range(n), k, normalize=dev)
                cxt.Loader(dev, k, 97, normalize=dev)
                cxt.FrameDataset(dev, k, normalize=dev)
            self.assertFalse([m for m in w if "own statistics" in str(m.message)])

    def epoch(self, loader):
        xs, ys = [], []
        for x, y in loader:
            xs.append(x)
            ys.append(y)
        return torch.cat(xs), torch.cat(ys)

    def test_loader_epochs_are_permutations(self):
        L = cxt.Loader(self.path, 2, 500, shuffle=True, seed=5, threads=2)
        self.assertEqual(len(L), -(-len(self.ds) // 500))
        x0, y0 = self.epoch(L)
        self.assertEqual(L.epoch, 1)  # advanced by itself
        x1, y1 = self.epoch(L)
        # the windows of a permutation: same multiset of labels, different order
        self.assertEqual(len(y0), len(self.ds))
        self.assertTrue(torch.equal(torch.sort(y0).values, torch.sort(y1).values))
        self.assertFalse(torch.equal(y0, y1))
        frames = ctxshard.Sampler(self.ds, ctxshard.SHUFFLE, seed=5).get(0)
        wx, wy = self.ds.gather(frames, 2, labels=True)
        self.assertTrue(torch.equal(x0, torch.from_numpy(wx)))
        self.assertTrue(torch.equal(y0, torch.from_numpy(wy)))

    def test_loader_hugepage_budget(self):
        """Loader(path, hugepage_budget=...): an epoch served from the copy
        in huge pages equals the gather of its frames from the mapping."""
        L = cxt.Loader(self.path, 20, 500, shuffle=True, seed=5, threads=2,
                       hugepage_budget="1G")
        hp = L.dataset.hugepages
        self.assertTrue(hp["bytes"] > 0 or "huge pages" in hp["reason"], hp)
        x0, y0 = self.epoch(L)
        frames = ctxshard.Sampler(self.ds, ctxshard.SHUFFLE, seed=5).get(0)
        wx, wy = self.ds.gather(frames, 20, labels=True)
        self.assertTrue(torch.equal(x0, torch.from_numpy(wx)))
        self.assertTrue(torch.equal(y0, torch.from_numpy(wy)))
        with self.assertRaises(ValueError):
            cxt.Loader(self.ds, 2, 500, hugepage_budget="1G")

    def test_loader_resume_exactly(self):
        L = cxt.Loader(self.path, 2, 300, seed=9, threads=2)
        L.set_epoch(3)
        full_x, _ = self.epoch(L)
        L.set_epoch(3)
        it = iter(L)
        for _ in range(5):
            next(it)
        state = L.state_dict()
        del it
        self.assertEqual(state["epoch"], 3)
        self.assertEqual(state["position"], 1500)
        M = cxt.Loader(self.path, 2, 300, seed=9, threads=1)
        M.load_state_dict(state)
        rest_x, _ = self.epoch(M)
        self.assertTrue(torch.equal(rest_x, full_x[1500:]))
        with self.assertRaises(ValueError):
            cxt.Loader(self.path, 2, 300, seed=10).load_state_dict(state)
        # drop_last: a state taken after the last full batch (inside the
        # loop, as a training step saves it) is the next epoch's start, not
        # a tail with no full batch left in it
        D = cxt.Loader(self.path, 2, 300, seed=9, threads=2, drop_last=True)
        n = 0
        for _ in D:
            n += 1
            if n == len(D):
                state = D.state_dict()
        self.assertEqual((state["epoch"], state["global_position"]), (1, 0))
        self.assertLess(len(D) * 300, len(self.ds))

    BLOCK = {"memory": "1M", "blocks": 2}  # blocks of 349,525 bytes: 8 of them here

    def test_loader_block(self):
        """shuffle="block": the block sampler's order, every frame once an
        epoch, another order the next epoch; its arguments checked."""
        L = cxt.Loader(self.path, 2, 500, shuffle="block", seed=5, threads=2, **self.BLOCK)
        s = ctxshard.Sampler(self.ds, ctxshard.BLOCK, seed=5, memory=1 << 20, blocks=2)
        self.assertGreater(s.num_blocks(0), 4)
        self.assertEqual(s.block_bytes, (1 << 20) // 3)
        for epoch in range(2):
            x, y = self.epoch(L)
            frames = s.get(epoch)
            self.assertEqual(sorted(frames.tolist()), list(range(len(self.ds))))
            wx, wy = self.ds.gather(frames, 2, labels=True)
            self.assertTrue(torch.equal(x, torch.from_numpy(wx)) and torch.equal(y, torch.from_numpy(wy)))
        self.assertFalse(np.array_equal(s.get(0), s.get(1)))
        bad = [({"shuffle": "blocks"}, ValueError, 'not one of True.*"block"'),
               ({"shuffle": 1}, TypeError, "shuffle=1 is a int, expected True or False"),
               ({"shuffle": "block"}, ValueError, 'needs memory=.*"2G"'),
               ({"shuffle": True, "memory": "1G"}, ValueError, 'apply to shuffle="block" only'),
               ({"shuffle": "block", "memory": "1Q"}, ValueError, "not a size.*'512M'"),
               ({"shuffle": "block", "memory": 1.5e9}, TypeError, "expected a size"),
               ({"shuffle": "block", "memory": "1M", "blocks": 0}, ValueError, "blocks=0"),
               ({"shuffle": "block", "memory": "1M", "weighted": True}, ValueError,
                "exclude each other"),
               ({"shuffle": "block", "memory": "100K"}, ValueError,
                "cannot hold the longest utterance.*Give memory=[0-9]+ .* or more")]
        for kw, exc, msg in bad:
            with self.assertRaisesRegex(exc, msg):
                cxt.Loader(self.path, 2, 500, **kw)

    def test_loader_elastic_resume(self):
        """A run saved on N=2 ranks resumes on M=3 and M=1 ranks (other
        threads, another batch size): together they serve the epoch's global
        order, nothing repeated or lost, then the next epoch as a fresh run
        on M ranks would."""
        n, D = len(self.ds), self.ds.dim
        for shuffle, kw, kind in ((True, {}, ctxshard.SHUFFLE),
                                  ("block", self.BLOCK, ctxshard.BLOCK)):
            order = ctxshard.Sampler(self.ds, kind, seed=3, **(
                {"memory": kw["memory"], "blocks": kw["blocks"]} if kw else {})).get(2)
            want = self.ds.gather(order, 0)
            for M in (3, 1):
                N, B, p = 2, 128, 23  # the first run stops after p batches of B
                got = np.full((n + 3, D), np.nan, dtype=np.float32)
                states = []
                for r in range(N):
                    L = cxt.Loader(self.path, 0, B, shuffle=shuffle, seed=3, rank=r,
                                   world_size=N, threads=2, **kw)
                    L.set_epoch(2)
                    it = iter(L)
                    x = torch.cat([next(it)[0] for _ in range(p)]).numpy()
                    del it
                    got[r:r + N * len(x):N] = x
                    states.append(L.state_dict())
                G = N * p * B
                self.assertEqual(states[0], dict(states[1], rank=0))
                self.assertEqual((states[0]["epoch"], states[0]["global_position"]), (2, G))
                served = 0
                for r in range(M):
                    L = cxt.Loader(self.path, 0, 100, shuffle=shuffle, seed=3, rank=r,
                                   world_size=M, threads=1 + r % 2, **kw)
                    L.load_state_dict(states[r % N])
                    x = torch.cat([x for x, _ in L]).numpy()
                    self.assertEqual(len(x), -(-(n - G) // M))
                    self.assertEqual(L.epoch, 3)
                    got[G + r:G + r + M * len(x):M] = x
                    served += len(x)
                    # the next epoch: a fresh run's on M ranks
                    F = cxt.Loader(self.path, 0, 100, shuffle=shuffle, seed=3, rank=r,
                                   world_size=M, **kw)
                    F.set_epoch(3)
                    self.assertTrue(torch.equal(next(iter(L))[0], next(iter(F))[0]))
                self.assertTrue(np.array_equal(got[:n], want), (shuffle, M))
                pad = G + served - n  # DistributedSampler's padding: from the start
                self.assertTrue(np.array_equal(got[n:n + pad], want[:pad]))
        # what fixes the order must match
        state = cxt.Loader(self.path, 0, 64, shuffle="block", seed=3, **self.BLOCK).state_dict()
        self.assertEqual((state["sampler"], state["memory"], state["blocks"]),
                         ("block", 1 << 20, 2))
        for kw, msg in (({"shuffle": True}, "sampler 'block'"),
                        ({"shuffle": "block", "memory": "2M", "blocks": 2}, "memory 1048576"),
                        ({"shuffle": "block", "memory": "1M", "blocks": 1}, "blocks 2"),
                        ({"shuffle": "block", "seed": 4, **self.BLOCK}, "seed 3")):
            with self.assertRaisesRegex(ValueError, msg):
                cxt.Loader(self.path, 0, 64, **dict({"seed": 3}, **kw)).load_state_dict(state)
        # a block-order state saved mid-epoch by a version with another
        # block schedule (states without block_order: the first one) is
        # refused; at an epoch boundary it does not matter
        self.assertEqual(state["block_order"], cxt.Loader.BLOCK_ORDER)
        first = {k: v for k, v in state.items() if k != "block_order"}
        L = cxt.Loader(self.path, 0, 64, shuffle="block", seed=3, **self.BLOCK)
        with self.assertRaisesRegex(ValueError, "saved mid-epoch with block order 1.*"
                                    r"state\['epoch'\] = 1, state\['global_position'\] = 0"):
            L.load_state_dict(dict(first, epoch=0, global_position=128))
        L.load_state_dict(dict(first, epoch=1, global_position=0))
        self.assertEqual((L.epoch, L.state_dict()["global_position"]), (1, 0))
        # a state saved before global positions: (position, world_size)
        per_rank = len(ctxshard.Sampler(self.ds, ctxshard.SHUFFLE, seed=3, rank=0,
                                        world_size=2))
        old = {"epoch": 1, "position": 40, "seed": 3, "world_size": 2,
               "samples_per_epoch": per_rank}
        L = cxt.Loader(self.path, 0, 64, seed=3)
        L.load_state_dict(old)
        self.assertEqual(L.state_dict()["global_position"], 80)
        # ... which says what data it was of: another count is refused
        with self.assertRaisesRegex(ValueError, "samples_per_epoch"):
            L.load_state_dict(dict(old, samples_per_epoch=per_rank - 1))

    def test_loader_hostile_states(self):
        """load_state_dict range-checks every number and requires the keys
        that identify the order: a state stripped of them, or of another
        dataset, or past the last epoch, is refused, naming the key."""
        L = cxt.Loader(self.path, 2, 300, seed=9)
        state = L.state_dict()
        for key, value, msg in (
                ("epoch", 2**64 - 1, r"state\['epoch'\]=18446744073709551615 is out of range"),
                ("epoch", -1, r"state\['epoch'\]=-1 is out of range"),
                ("global_position", len(self.ds) + 1, r"state\['global_position'\]=.* out of "
                 "range: expected 0..epoch_samples"),
                ("global_position", -5, "global_position"),
                ("epoch_samples", len(self.ds) - 1, "epoch_samples .* does not match")):
            with self.subTest(key=key, value=value):
                with self.assertRaisesRegex(ValueError, msg):
                    L.load_state_dict(dict(state, **{key: value}))
        for key in ("seed", "epoch", "global_position", "sampler", "epoch_samples"):
            with self.subTest(removed=key):
                with self.assertRaisesRegex(ValueError, f"state lacks {key}"):
                    L.load_state_dict({k: v for k, v in state.items() if k != key})
        with self.assertRaisesRegex(ValueError, "past the last one"):
            L.load_state_dict(dict(state, epoch=2**63 - 1, global_position=len(self.ds)))
        with self.assertRaisesRegex(ValueError, "epoch=18446744073709551615 is out of range"):
            L.set_epoch(2**64 - 1)
        # refused states leave the loader as it was; the last epoch itself works
        self.assertEqual(L.state_dict(), state)
        L.load_state_dict(dict(state, epoch=2**63 - 1))
        self.assertEqual(L.state_dict()["epoch"], 2**63 - 1)

    def test_loader_len_after_resume(self):
        """len(loader) is what the next iteration yields: after
        load_state_dict, the batches that remain of the epoch."""
        for kw in ({}, {"drop_last": True}, {"rank": 1, "world_size": 3}):
            with self.subTest(**kw):
                L = cxt.Loader(self.path, 1, 256, seed=2, **kw)
                full = len(L)
                it = iter(L)
                for _ in range(5):
                    next(it)
                state = L.state_dict()
                del it
                M = cxt.Loader(self.path, 1, 256, seed=2, **kw)
                M.load_state_dict(state)
                self.assertEqual(len(M), full - 5)
                self.assertEqual(sum(1 for _ in M), full - 5)
                self.assertEqual(len(M), full)  # the next epoch: whole again

    def test_gpu_loader_emulated(self):
        # stream and resident deliver exactly the host loader's batches,
        # epoch after epoch (the device loader is kept and reset)
        for mode in ("stream", "resident"):
            G = cxt.Loader(self.path, 6, 700, seed=4, threads=2, gpu_emulate=True, gpu_mode=mode)
            H = cxt.Loader(self.path, 6, 700, seed=4, threads=2)
            for epoch in range(2):
                # a device batch is valid until the next one: keep clones
                got = [(x.clone(), y.clone()) for x, y in G]
                want = list(H)
                self.assertEqual(len(got), len(want))
                for (gx, gy), (hx, hy) in zip(got, want):
                    self.assertTrue(torch.equal(gx, hx) and torch.equal(gy, hy))
                self.assertEqual(sum(len(y) for _, y in got), len(self.ds))
                self.assertEqual(G.epoch, epoch + 1)
            self.assertEqual(G.gpu_mode, mode)
            # resume mid-epoch from a state_dict
            G.set_epoch(5)
            it = iter(G)
            for _ in range(3):
                next(it)
            del it
            state = G.state_dict()
            self.assertEqual(state["position"], 2100)
            M = cxt.Loader(self.path, 6, 700, seed=4, gpu_emulate=True, gpu_mode=mode)
            M.load_state_dict(state)
            rest = torch.cat([y.clone() for _, y in M])
            H.set_epoch(5)
            full = torch.cat([y for _, y in H])
            self.assertTrue(torch.equal(rest, full[2100:]))
            G.close()
        # pool with bfloat16 output: each frame once per epoch (the label
        # multiset), values the bfloat16 rounding of the float32 windows
        P = cxt.Loader(self.path, 3, 512, seed=1, gpu_emulate=True, gpu_mode="pool",
                       gpu_budget=(3 * 512 * (self.ds.input_size(3) * 2 + 8 + 24)
                                   + 4 * 3 * self.ds.info["max_length"] * self.ds.dim * 4),
                       gpu_dtype=torch.bfloat16)
        ys = []
        for x, y in P:
            self.assertEqual(x.dtype, torch.bfloat16)
            self.assertEqual(x.shape[1], self.ds.input_size(3))
            ys.append(y.clone())
        ys = torch.cat(ys)
        counts = torch.bincount(ys, minlength=len(self.ds.stats.label_counts))
        self.assertTrue(np.array_equal(counts.numpy(), self.ds.stats.label_counts.astype(np.int64)))
        self.assertEqual(P.gpu_info["mode"], "pool")

    def test_gpu_pool_resume_mid_epoch(self):
        """The pool (emulated) stopped mid-epoch and resumed from its
        state_dict serves the rest of the same epoch: with the first part,
        every frame exactly once; another pool layout is refused."""
        n = len(self.ds)
        rows = self.ds.gather(np.arange(n), 0)
        index = {r.tobytes(): i for i, r in enumerate(rows)}
        self.assertEqual(len(index), n)
        budget = 3 * 256 * (self.ds.input_size(0) * 4 + 8 + 24) + \
            4 * 3 * self.ds.info["max_length"] * self.ds.dim * 4

        def pool(batch=256, b=budget):
            return cxt.Loader(self.path, 0, batch, seed=5, gpu_emulate=True, gpu_mode="pool",
                              gpu_budget=b, labels=False)

        def frames(xs):
            return [index[r.tobytes()] for r in torch.cat(xs).numpy()]
        A = pool()
        it = iter(A)
        first = frames([next(it).clone() for _ in range(5)])
        self.assertEqual(A.gpu_mode, "pool")
        state = A.state_dict()
        del it
        self.assertIn("gpu_pool", state)
        B = pool()
        B.load_state_dict(state)
        rest = frames([x.clone() for x in B])
        self.assertEqual(sorted(first + rest), list(range(n)))
        C = pool(b=budget * 2)
        C.load_state_dict(state)
        with self.assertRaisesRegex(ValueError, "GPU pool was laid out as"):
            next(iter(C))

    def test_gpu_fallback_without_device(self):
        import ctxshard.gpu as g
        if g.probe(0)["usable"]:
            self.skipTest("a CUDA device is usable here")
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            L = cxt.Loader(self.path, 2, 64, device="cuda")
            x, y = next(iter(L))  # the documented fallback, not torch's pinned-memory error
        self.assertEqual(L.gpu_mode, "host")
        self.assertTrue(L.gpu_reason)
        self.assertEqual(x.shape, (64, L.input_size))
        if torch.cuda.is_available():  # a torch with CUDA, a library without: pinned copies
            self.assertTrue(L.pin_memory)
            self.assertEqual(x.device.type, "cuda")
        else:  # a CPU-only torch: CPU batches, and a warning that says so
            self.assertFalse(L.pin_memory)
            self.assertEqual(x.device.type, "cpu")
            self.assertTrue(any("batches stay on the CPU" in str(m.message) for m in w),
                            [str(m.message) for m in w])
        with self.assertRaises(ValueError):
            cxt.Loader(self.path, 2, 64, device="cuda", gpu_mode="fast")

    def test_loader_ranks_partition(self):
        got = []
        for r in range(3):
            L = cxt.Loader(self.path, 0, 1000, seed=2, rank=r, world_size=3, drop_last=False)
            _, y = self.epoch(L)
            got.append(len(y))
            s = ctxshard.Sampler(self.ds, ctxshard.SHUFFLE, seed=2, rank=r, world_size=3)
            self.assertEqual(len(y), len(s))
        self.assertEqual(len(set(got)), 1)
        frames = np.concatenate([ctxshard.Sampler(self.ds, ctxshard.SHUFFLE, seed=2, rank=r,
                                                  world_size=3, drop_last=True).get(0)
                                 for r in range(3)])
        self.assertEqual(len(np.unique(frames)), len(frames))

    def test_loader_weighted_and_kept_batches(self):
        L = cxt.Loader(self.path, 1, 4096, weighted=True, seed=1, num_samples=40000)
        _, y = self.epoch(L)
        counts = torch.bincount(y, minlength=42).float()
        present = (torch.tensor(self.ds.stats.label_counts.astype(np.int64)) > 0)
        share = counts[present] / counts.sum()
        self.assertLess(float(share.max() - share.min()), 0.02)  # balanced classes
        # Batches kept past the next step stay intact (fresh buffers each time),
        # also when only the labels, or only a slice, are kept.
        L = cxt.Loader(self.path, 3, 200, shuffle=False)
        kept = [(x, y) for x, y in L]
        wx, wy = self.ds.gather(range(len(self.ds)), 3, labels=True)
        self.assertTrue(torch.equal(torch.cat([x for x, _ in kept]), torch.from_numpy(wx)))
        ys = [y for _, y in L]
        self.assertTrue(torch.equal(torch.cat(ys), torch.from_numpy(wy)))
        heads = [x[:2] for x, _ in L]
        self.assertTrue(torch.equal(torch.cat(heads), torch.from_numpy(
            np.concatenate([wx[i:i + 2] for i in range(0, len(wx), 200)]))))

    def test_example_trains(self):
        for order in ("full", "block"):
            out = subprocess.run(
                [sys.executable, os.path.join(SRC, "examples", "train_mlp.py"), "--synth",
                 "--train-utts", "150", "--dev-utts", "20", "--hidden", "128", "--epochs", "2",
                 "--context", "5", "--shuffle", order], check=True, capture_output=True,
                text=True, env=os.environ if INSTALLED else
                dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))).stdout
            majority = float(re.search(r"majority class ([\d.]+)%", out).group(1)) / 100
            dev = float(re.findall(r"dev accuracy ([\d.]+)%", out)[-1]) / 100
            self.assertGreater(dev, majority + 0.15, out)
            self.assertEqual("block order: memory" in out, order == "block", out)

    def test_example_options(self):
        """train_mlp.py: --help is whole and names every option; train's
        statistics for every split, weighted sampling, and the submission
        CSV (id,label: one row per test frame, in order, phoneme symbols)."""
        script = os.path.join(SRC, "examples", "train_mlp.py")
        env = os.environ if INSTALLED else dict(os.environ,
                                                PYTHONPATH=os.path.join(SRC, "python"))
        h = subprocess.run([sys.executable, script, "--help"], check=True, capture_output=True,
                           text=True, env=env).stdout
        for opt in ("--normalize", "--weighted", "--predictions", "--test", "--synth-raw",
                    "minus the\n"
                    "data-loading code", "id,label"):
            self.assertIn(opt, h)
        csv = os.path.join(TMP, "submission.csv")
        out = subprocess.run(
            [sys.executable, script, "--synth", "--train-utts", "60", "--dev-utts", "8",
             "--hidden", "64", "--epochs", "1", "--context", "3", "--normalize", "--weighted",
             "--predictions", csv], check=True, capture_output=True, text=True, env=env)
        self.assertNotIn("own statistics", out.stderr)  # train's statistics, said explicitly
        m = re.search(r"wrote .*: (\d+) predictions", out.stdout)
        self.assertTrue(m, out.stdout)
        with open(csv) as f:
            rows = f.read().splitlines()
        self.assertEqual(rows[0], "id,label")
        self.assertEqual(len(rows) - 1, int(m.group(1)))
        ids = [int(r.split(",")[0]) for r in rows[1:]]
        self.assertEqual(ids, list(range(len(ids))))
        self.assertTrue(set(r.split(",")[1] for r in rows[1:]) <= set(ctxshard.PHONEMES))


class Warm(unittest.TestCase):
    """Dataset.warm(), Loader(prefetch=) and the warning for a full shuffle
    over data larger than memory (CTXSHARD_MEMORY_AVAILABLE plays a small
    machine)."""

    def setUp(self):
        self.path = os.path.join(TMP, "f32")
        self.size = sum(os.path.getsize(os.path.join(self.path, n)) for n in os.listdir(self.path))
        os.environ.pop("CTXSHARD_MEMORY_AVAILABLE", None)

    def tearDown(self):
        os.environ.pop("CTXSHARD_MEMORY_AVAILABLE", None)

    def test_warm(self):
        seen = []
        with ctxshard.open(self.path) as ds:
            self.assertEqual(ds.nbytes, self.size)
            r = ds.warm(progress=lambda done, total: seen.append((done, total)))
        self.assertEqual(r["bytes_read"], self.size)
        self.assertTrue(r["fits"])
        self.assertEqual(seen[-1], (self.size, self.size))
        self.assertEqual([d for d, _ in seen], sorted(d for d, _ in seen))

    def test_warm_skip_cached(self):
        """skip_cached=True reads only what is not cached (what the Loader's
        warm-up does): nothing for a cached dataset, the files evicted
        (posix_fadvise DONTNEED on this test's own files) again."""
        seen = []
        path = os.path.join(TMP, "f32-evicted")  # a copy no other test maps
        shutil.copytree(self.path, path)
        with ctxshard.open(path) as ds:
            ds.warm()
            r = ds.warm(skip_cached=True, progress=lambda d, t: seen.append(d))
            if r["cached_before"] == self.size:  # nothing else evicted it meanwhile
                self.assertEqual(r["bytes_read"], 0)
            self.assertEqual(seen[-1], self.size)
            for name in os.listdir(path):
                fd = os.open(os.path.join(path, name), os.O_RDONLY)
                os.fsync(fd)  # written back: clean pages can be dropped
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
            r = ds.warm(skip_cached=True)
            self.assertGreater(r["bytes_read"], 0)
            self.assertLess(r["cached_before"], self.size)
            with self.assertRaisesRegex(TypeError, "skip_cached=1 is a int"):
                ds.warm(skip_cached=1)

    def test_warm_does_not_fit(self):
        os.environ["CTXSHARD_MEMORY_AVAILABLE"] = "4K"
        self.assertEqual(ctxshard.memory_available()["available"], 4096)
        self.assertTrue(ctxshard.memory_available()["from_env"])
        with ctxshard.open(self.path) as ds:
            self.assertFalse(ds.fits_in_memory())
            with self.assertRaisesRegex(MemoryError, "does not fit.*block sampler"):
                ds.warm()
            self.assertFalse(ds.warm(force=True)["fits"])
        os.environ["CTXSHARD_MEMORY_AVAILABLE"] = "plenty"
        with self.assertRaisesRegex(ValueError, "CTXSHARD_MEMORY_AVAILABLE: 'plenty'"):
            ctxshard.memory_available()

    def test_warm_stops(self):
        import threading
        stop = threading.Event()
        stop.set()
        with ctxshard.open(self.path) as ds, self.assertRaises(InterruptedError):
            ds.warm(stop=stop)

    def test_warm_in_background(self):
        """The library's own warm-up thread: the same figures as warm() in
        this thread, progress to the total, stop(), refusals."""
        with ctxshard.open(self.path) as ds:
            fg = ds.warm()
            w = ds.warm(background=True, skip_cached=True)
            r = w.wait()
            self.assertFalse(w.running)
            self.assertEqual(w.progress, (fg["total_bytes"], fg["total_bytes"]))
            self.assertEqual(r["total_bytes"], fg["total_bytes"])
            self.assertTrue(r["fits"])
            self.assertEqual(w.wait(), r)  # ended: the same answer again
            w = ds.warm(background=True)
            r = w.stop()  # cut short (None), or done already on this small dataset
            self.assertTrue(r is None or r["total_bytes"] == fg["total_bytes"], r)
            if r is None:
                with self.assertRaisesRegex(InterruptedError, "warming stopped"):
                    w.wait()
            with self.assertRaisesRegex(ValueError, "background=True"):
                ds.warm(background=True, progress=print)
            w = ds.warm(background=True)
        del ds  # the warm-up holds the dataset open until it ends
        self.assertEqual(w.wait()["total_bytes"], fg["total_bytes"])

    def child(self, code):
        """code run in a fresh interpreter on a dataset of 17 files, 60 MB
        (a warm-up of it lasts long enough to be caught running); a crash
        or a hang there fails this test instead of killing the suite."""
        big = os.path.join(TMP, "warm60")
        if not os.path.exists(big):
            for argv in (["synth", big + "-raw", "--utts", "400", "--seed", "2", "--quiet"],
                         ["pack", big + "-raw", big, "--shard-size", "4M", "--quiet"]):
                subprocess.run([EXE, *argv], check=True)
        env = os.environ if INSTALLED else dict(os.environ,
                                                PYTHONPATH=os.path.join(SRC, "python"))
        p = subprocess.run([sys.executable, "-c", code, big], env=env, timeout=120,
                           capture_output=True, text=True)
        return p.returncode, p.stderr

    def test_warm_ends_before_its_dataset_in_any_order(self):
        """A running warm-up collected in a reference cycle with its
        dataset: the dataset is never closed under the warm-up's thread (it
        was: a crash, 5 runs in 5)."""
        rc, err = self.child(
            "import gc, sys, ctxshard\n"
            "class T: pass\n"
            "for i in range(30):\n"
            "    t = T(); t.self = t\n"
            "    t.ds = ctxshard.open(sys.argv[1]); t.w = t.ds.warm(background=True, force=True)\n"
            "    del t; gc.collect()\n")
        self.assertEqual(rc, 0, err)

    def test_warm_finished_by_two_threads_and_in_a_fork(self):
        """wait() in one thread while another calls stop() (it hung: two
        joins of one thread), and a forked child, where the warm-up is the
        parent's (it joined the parent's thread and reported a success)."""
        rc, err = self.child(
            "import os, sys, threading, ctxshard\n"
            "ds = ctxshard.open(sys.argv[1])\n"
            "for i in range(20):\n"
            "    w = ds.warm(background=True, force=True)\n"
            "    t = threading.Thread(target=w.stop); t.start()\n"
            "    try:\n"
            "        w.wait()\n"
            "    except InterruptedError:\n"
            "        pass\n"
            "    t.join(30); assert not t.is_alive()\n"
            "w = ds.warm(background=True, force=True)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    try:\n"
            "        assert not w.running\n"
            "        w.wait()\n"
            "        os._exit(1)\n"
            "    except ChildProcessError:\n"
            "        os._exit(0)\n"
            "_, st = os.waitpid(pid, 0)\n"
            "assert os.WEXITSTATUS(st) == 0, st\n"
            "assert w.wait()['total_bytes'] > 0\n")
        self.assertEqual(rc, 0, err)

    @unittest.skipIf(torch is None, "torch not installed")
    def test_prefetch_failure_costs_nothing(self):
        """A warm-up that cannot start (its dataset closed after the first
        batch) leaves the epoch as it was (it ended it with ValueError)."""
        ds = ctxshard.open(self.path)
        n = len(ds)
        ld = cxt.Loader(ds, 3, 256, prefetch=True)
        seen = 0
        for i, (x, y) in enumerate(ld):
            if i == 0:
                ds.close()
            seen += len(y)
        self.assertEqual(seen, n)
        ld.wait_prefetch()
        ld.close()

    @unittest.skipIf(torch is None, "torch not installed")
    def test_loader_prefetch_and_warning(self):
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ld = cxt.Loader(self.path, 3, 64, prefetch=True)
            self.assertTrue(ld._prefetch)  # fits: to warm in the background
            n = sum(len(y) for _, y in ld)
            self.assertIsInstance(ld._warming, ctxshard.Warming)  # started after batch 1
            ld.wait_prefetch()
            self.assertFalse(ld._warming.running)
            ld.close()
            self.assertIsNone(ld._warming)
            ld = cxt.Loader(self.path, 3, 64, prefetch=False)
            self.assertFalse(ld._prefetch)
            self.assertEqual(sum(len(y) for _, y in ld), n)
            self.assertIsNone(ld._warming)
        self.assertEqual(n, len(ctxshard.open(self.path)))
        self.assertEqual([x for x in w if "block" in str(x.message)], [])
        os.environ["CTXSHARD_MEMORY_AVAILABLE"] = "4K"
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ld = cxt.Loader(self.path, 3, 64, prefetch=True)
            self.assertFalse(ld._prefetch)  # does not fit: no warm-up
            cxt.Loader(self.path, 3, 64, shuffle=False)  # sequential: no warning
        msgs = [str(x.message) for x in w if "block" in str(x.message)]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIn('shuffle="block"', msgs[0])
        self.assertIn("larger than the memory available", msgs[0])
        # The block sampler: no warning within the memory available, no
        # warm-up (it reads its blocks ahead itself); one when its budget
        # is more than that memory.
        os.environ["CTXSHARD_MEMORY_AVAILABLE"] = str(self.size * 3 // 4)  # > 1M
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ld = cxt.Loader(self.path, 3, 64, shuffle="block", memory="1M", blocks=2)
            self.assertFalse(ld._prefetch)
            self.assertEqual(sum(len(y) for _, y in ld), len(ctxshard.open(self.path)))
            self.assertIsNone(ld._warming)
        self.assertEqual([str(x.message) for x in w], [])
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            cxt.Loader(self.path, 3, 64, shuffle="block", memory=self.size, blocks=2)
        msgs = [str(x.message) for x in w]
        self.assertEqual(len(msgs), 1, msgs)
        self.assertIn("more than the memory available", msgs[0])


class Installation(unittest.TestCase):
    """One version everywhere; the command as `ctxshard` and `python -m
    ctxshard`; installed, the package and its library come from the
    environment, found with no variable."""

    def test_one_version(self):
        meson = re.search(r"project\('ctxshard'.*?version\s*:\s*'([^']+)'",
                          open(os.path.join(SRC, "meson.build")).read(), re.S).group(1)
        self.assertEqual(ctxshard.__version__, meson)
        self.assertEqual(ctxshard.version(), meson)  # the C library's cxs_version()
        cli = subprocess.run([EXE, "--version"], capture_output=True, text=True, check=True).stdout
        self.assertEqual(cli.split()[:2], ["ctxshard", meson])
        mod = subprocess.run([sys.executable, "-m", "ctxshard", "--version"], capture_output=True,
                             text=True, check=True, env=self.env()).stdout
        self.assertEqual(mod, cli)
        if INSTALLED:
            import importlib.metadata
            self.assertEqual(importlib.metadata.version("ctxshard"), meson)

    def env(self):
        return os.environ if INSTALLED else dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))

    def test_python_m_is_the_command(self):
        failed = []
        for argv in ([EXE], [sys.executable, "-m", "ctxshard"]):
            p = subprocess.run([*argv, "info", os.path.join(TMP, "nonexistent")],
                               capture_output=True, text=True, env=self.env())
            self.assertNotEqual(p.returncode, 0, p.stderr)
            self.assertIn("nonexistent", p.stderr)
            failed.append((p.returncode, p.stderr))
            p = subprocess.run([*argv, "info", os.path.join(TMP, "f16"), "--json"],
                               capture_output=True, text=True, env=self.env(), check=True)
            self.assertIn('"dtype"', p.stdout)
        self.assertEqual(failed[0], failed[1])  # same exit status, same message

    @unittest.skipIf(INSTALLED, "tests the checkout's package")
    def test_import_errors_say_what_to_do(self):
        """A library that is there but does not load, and one installed
        (meson install) that the dynamic loader does not know yet: the
        ImportError says so, and what to run (ldconfig, LD_LIBRARY_PATH)."""
        bad = os.path.join(TMP, "libctxshard.so")
        with open(bad, "w") as f:
            f.write("not a library\n")
        code = "import ctxshard"
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(self.env(), CTXSHARD_LIB=bad))
        self.assertIn("exists but cannot be loaded", p.stderr)
        self.assertIn("LD_LIBRARY_PATH", p.stderr)
        # an installed copy found where meson install puts it, loaded by path
        inst = os.path.join(TMP, "prefix", "lib")
        os.makedirs(inst, exist_ok=True)
        shutil.copy(os.environ["CTXSHARD_LIB"], os.path.join(inst, "libctxshard.so.0"))
        # neither named nor on the loader's path (meson test sets
        # LD_LIBRARY_PATH to the build's lib/)
        env = {k: v for k, v in self.env().items() if k not in ("CTXSHARD_LIB", "LD_LIBRARY_PATH")}
        pkg = os.path.join(TMP, "pkg", "ctxshard")
        shutil.copytree(os.path.join(SRC, "python", "ctxshard"), pkg, dirs_exist_ok=True)
        with open(os.path.join(pkg, "_native.py")) as f:
            nat = f.read()
        with open(os.path.join(pkg, "_native.py"), "w") as f:  # this test's prefix
            f.write(nat.replace('("/usr/local", "/usr")', repr((os.path.join(TMP, "prefix"),))))
        code = "import ctxshard, ctxshard._native as n; print(n.lib_path)"
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(env, PYTHONPATH=os.path.dirname(pkg)))
        self.assertEqual(p.stdout.strip(), os.path.join(inst, "libctxshard.so.0"), p.stderr)
        with open(os.path.join(inst, "libctxshard.so.0"), "w") as f:
            f.write("broken\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=dict(env, PYTHONPATH=os.path.dirname(pkg)))
        self.assertIn("is installed but cannot be loaded", p.stderr)
        self.assertIn("sudo ldconfig", p.stderr)
        self.assertIn(f"LD_LIBRARY_PATH={inst}", p.stderr)

    @unittest.skipUnless(INSTALLED, "tests an installed package")
    def test_installed_layout(self):
        self.assertNotIn("PYTHONPATH", os.environ)
        self.assertNotIn("CTXSHARD_LIB", os.environ)
        pkg = os.path.dirname(os.path.abspath(ctxshard.__file__))
        self.assertFalse(pkg.startswith(SRC + os.sep), pkg)
        self.assertTrue(pkg.startswith(sys.prefix + os.sep), pkg)
        from ctxshard import _native
        self.assertEqual(os.path.dirname(os.path.abspath(_native.lib_path)), pkg)
        from ctxshard.__main__ import command
        self.assertEqual(command(), os.path.join(pkg, "bin", "ctxshard"))
        self.assertTrue(os.path.isfile(EXE), EXE)


if __name__ == "__main__":
    # test names may follow the two arguments (Class or Class.test_name)
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=1)
