"""Damaged and changing datasets through the Python package and bench-read:
a shard truncated under a running Loader, UtteranceLoader and bench-read
ends the batch in flight in an error naming the shard (the process lives
on: it died of SIGBUS before); labels outside the vocabulary are never
served; a damaged compressed chunk names the shard, utterance and chunk;
window() refuses a damaged guard row; verify recomputes the statistics
(forged STATS with their checksums recomputed passed it) and locates damaged
feature values by utterance.  Block sums (format 1.3): verify, warm and the
block sampler's Loader name the utterances a damaged block holds (verify
could not, warm and the Loader served it); --block-sums off writes 1.2's
bytes, and merge refuses parts that differ in it.

usage: /usr/bin/python3 tests/python/damage_test.py BUILD_DIR SOURCE_ROOT"""
import ctypes
import os
import shutil
import struct
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
import ctxshard.torch as cxt  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-damage-")
RAW = os.path.join(TMP, "raw")
SHARD = "shard-000000.cxs"
SEC_FEATURES, SEC_LABELS, SEC_ZFEATURES, SEC_STATS = 4, 5, 6, 19

_XXH = ctypes.CDLL("libxxhash.so.0")
_XXH.XXH3_64bits.restype = ctypes.c_uint64
_XXH.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(b):
    b = bytes(b)
    return _XXH.XXH3_64bits(b, len(b))


def run(*args):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True)


def sections(data):
    n = struct.unpack_from("<I", data, 24)[0]
    out = {}
    for i in range(n):
        t, _, off, ln, _ = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
        out[t] = (off, ln, 64 + 32 * i)
    return out


def rehash(data):
    """Every section checksum and the header checksum of one file, as a
    writer that forged the bytes would leave them."""
    n = struct.unpack_from("<I", data, 24)[0]
    for i in range(n):
        _, _, off, ln, _ = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
        struct.pack_into("<Q", data, 64 + 32 * i + 24, xxh3(data[off:off + ln]))
    struct.pack_into("<Q", data, 56, 0)
    struct.pack_into("<Q", data, 56, xxh3(data[:64 + 32 * n]))


def copy(name, src="plain"):
    dst = os.path.join(TMP, name)
    shutil.copytree(os.path.join(TMP, src), dst)
    return dst


def edit(path, fn):
    data = bytearray(open(path, "rb").read())
    fn(data)
    with open(path, "r+b") as f:  # in place, as damage on disk would be
        f.write(bytes(data))


def setUpModule():
    assert run("synth", RAW, "--utts", 40, "--seed", 3, "--dim", 8, "--quiet").returncode == 0
    for name, extra in (("plain", ()), ("zstd", ("--compress", "zstd", "--chunk-size", "32K")),
                        ("nosums", ("--block-sums", "off"))):
        p = run("pack", RAW, os.path.join(TMP, name), "--quiet", *extra)
        assert p.returncode == 0, p.stderr


def tearDownModule():
    shutil.rmtree(TMP)


class Truncated(unittest.TestCase):
    """truncate(2) under a running reader."""

    def check(self, err, shard):
        self.assertIn(shard, err)
        self.assertIn("truncated", err)
        self.assertIn("utterance", err)

    def check_place(self, e, shard):
        """The exception says where, for a program: the shard and a byte
        past the 8192 it kept."""
        self.assertEqual(e.code, -5003)  # CXS_E_TRUNCATED
        self.assertEqual(e.file, shard)
        self.assertIsNotNone(e.offset)
        self.assertGreaterEqual(e.offset, 8192)

    def test_loader(self):
        for src in ("plain", "zstd"):
            with self.subTest(src):
                d = copy("trunc-loader-" + src, src)
                shard = os.path.join(d, SHARD)
                loader = cxt.Loader(d, context=3, batch_size=128, threads=2, seed=1)
                it = iter(loader)
                next(it)
                os.truncate(shard, 8192)
                with self.assertRaises(ctxshard.CtxshardError) as cm:
                    for _ in it:
                        pass
                self.check(str(cm.exception), shard)
                self.check_place(cm.exception, shard)
                # the process goes on: the next epoch says the same, nothing crashes
                with self.assertRaises(ctxshard.CtxshardError):
                    for _ in loader:
                        pass

    def test_utterance_loader(self):
        d = copy("trunc-utt")
        shard = os.path.join(d, SHARD)
        loader = cxt.UtteranceLoader(d, frame_budget=4000, threads=2)
        it = iter(loader)
        next(it)
        os.truncate(shard, 8192)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            for _ in it:
                pass
        self.check(str(cm.exception), shard)
        self.check_place(cm.exception, shard)

    def test_gpu_uploads(self):
        # the resident upload and the pool's refresher read the mapping
        # (staged: register=False) on the emulated device
        import ctxshard.gpu as g
        for mode in ("resident", "pool"):
            with self.subTest(mode):
                d = copy("trunc-gpu-" + mode)
                shard = os.path.join(d, SHARD)
                ds = ctxshard.open(d)
                s = ctxshard.Sampler(ds, ctxshard.SHUFFLE, seed=1)
                os.truncate(shard, 8192)
                info = ds.info
                budget = (4 * 2 * info["max_length"] * info["dim"] * 4 +
                          3 * 64 * (info["dim"] * 4 + 8 + 24)) if mode == "pool" else None
                with self.assertRaises(ctxshard.CtxshardError) as cm:
                    with g.GpuLoader(ds, s, 0, 64, device=g.EMULATE, mode=mode,
                                     register=False, budget=budget) as L:
                        while L.next() is not None:
                            pass
                self.assertIn(shard, str(cm.exception))
                self.assertIn("truncated", str(cm.exception))

    def test_gather(self):
        d = copy("trunc-gather")
        shard = os.path.join(d, SHARD)
        ds = ctxshard.open(d)
        ds.gather(np.arange(100, dtype=np.uint64), 3)
        os.truncate(shard, 8192)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.gather(np.arange(0, len(ds), 97, dtype=np.uint64), 3, threads=2)
        self.check(str(cm.exception), shard)
        ds.close()

    def test_utterance_and_pad_batch(self):
        from ctxshard.utterances import pad_batch
        d = copy("trunc-utt-z", "zstd")
        shard = os.path.join(d, SHARD)
        ds = ctxshard.open(d)
        U = len(ds.ids)
        ds.utterance(0)
        os.truncate(shard, 8192)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.utterance(U - 1)  # not decoded yet
        self.check(str(cm.exception), shard)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            pad_batch(ds, [U - 2])
        self.assertIn(shard, str(cm.exception))
        ds.close()

    def test_bench_read(self):
        d = copy("trunc-bench")
        shard = os.path.join(d, SHARD)
        p = subprocess.Popen([EXE, "bench-read", d, "--context", "3", "--batch", "256",
                              "--threads", "2", "--batches", "100000000"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # truncate once the loader's workers run (open is done): threads
        # beyond the main one show in /proc
        task = f"/proc/{p.pid}/task"
        while p.poll() is None and len(os.listdir(task)) < 3:
            pass
        os.truncate(shard, 8192)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 1, err)  # was -7 (SIGBUS), 135 in a shell
        self.check(err, shard)


class Damaged(unittest.TestCase):
    def test_label_outside_vocabulary_is_never_served(self):
        # with block sums (format 1.3) the block's check refuses it first
        d = copy("badlabel-sums")
        ds = ctxshard.open(d)
        at = ds.utterance_frames(5)[0] + 3
        ds.close()

        def bad(data):
            off, _, _ = sections(data)[SEC_LABELS]
            data[off + at] = 200
        edit(os.path.join(d, SHARD), bad)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            for _ in cxt.Loader(d, context=2, batch_size=512, shuffle=False, threads=2):
                pass
        self.assertIn("LABELS block ", str(cm.exception))
        self.assertIn("not served", str(cm.exception))
        # without them, the vocabulary
        d = copy("badlabel", "nosums")
        shard = os.path.join(d, SHARD)
        ds = ctxshard.open(d)
        V = len(ds.vocab)
        at = ds.utterance_frames(5)[0] + 3
        ds.close()

        def bad(data):
            off, _, _ = sections(data)[SEC_LABELS]
            data[off + at] = 200  # the vocabulary has fewer symbols
        edit(shard, bad)
        self.assertLess(V, 200)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            for _ in cxt.Loader(d, context=2, batch_size=512, shuffle=False, threads=2):
                pass
        msg = str(cm.exception)
        self.assertIn(shard, msg)
        self.assertIn("outside the vocabulary", msg)
        self.assertIn("utterance ", msg)
        ds = ctxshard.open(d)
        with self.assertRaises(ctxshard.CtxshardError):
            ds.gather(np.array([at], dtype=np.uint64), 2, labels=True)
        for call in (lambda: ds.labels_of(np.array([at - 1, at], dtype=np.uint64)),
                     lambda: ds.label(at)):
            with self.assertRaises(ctxshard.CtxshardError) as cm:
                call()
            self.assertIn(shard, str(cm.exception))
            self.assertIn("outside the vocabulary", str(cm.exception))
        # verify names the frame and its utterance
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.verify()
        self.assertIn("utterance ", str(cm.exception))
        ds.close()

    def test_damaged_chunk_names_shard_utterance_chunk(self):
        d = copy("badchunk", "zstd")
        shard = os.path.join(d, SHARD)

        def bad(data):
            off, ln, _ = sections(data)[SEC_ZFEATURES]
            data[off + ln // 2] ^= 0x55
        edit(shard, bad)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            for _ in cxt.Loader(d, context=2, batch_size=512, shuffle=False, threads=2):
                pass
        msg = str(cm.exception)  # was "loader: checksum mismatch"
        self.assertIn(shard, msg)
        self.assertIn("chunk ", msg)
        self.assertIn("utterance ", msg)
        # the chunk's place: within ZFEATURES, at or before the flipped byte
        off, ln, _ = sections(bytearray(open(shard, "rb").read()))[SEC_ZFEATURES]
        self.assertEqual(cm.exception.file, shard)
        self.assertTrue(off <= cm.exception.offset <= off + ln // 2, cm.exception.offset)
        p = run("verify", d)
        self.assertEqual(p.returncode, 1)
        self.assertIn("which holds rows of utterance", p.stderr)

    def test_window_refuses_damaged_guard_row(self):
        # with block sums (format 1.3) the block's check refuses it, and
        # everything else of the block
        d = copy("badguard-sums")
        ds = ctxshard.open(d)
        G, D = ds.guard, ds.dim
        ds.close()

        def guard7(data):
            off, _, _ = sections(data)[SEC_FEATURES]
            struct.pack_into("<f", data, off + (G - 1) * D * 4, 7.0)
        edit(os.path.join(d, SHARD), guard7)
        ds = ctxshard.open(d)
        for call in (lambda: ds.window(0, 2), lambda: ds.window(10, 2),
                     lambda: ds.gather(np.array([0], dtype=np.uint64), 2)):
            with self.assertRaises(ctxshard.CtxshardError) as cm:
                call()
            self.assertIn("checksum mismatch", str(cm.exception))
        ds.close()
        # without them, the guard rows' own check
        d = copy("badguard", "nosums")
        shard = os.path.join(d, SHARD)
        ds = ctxshard.open(d)
        G, D = ds.guard, ds.dim
        ok = np.array(ds.window(0, 2))
        self.assertFalse(ok[:2].any())
        ds.close()

        def bad(data):
            off, _, _ = sections(data)[SEC_FEATURES]
            # the guard row just before utterance 0's first frame
            struct.pack_into("<f", data, off + (G - 1) * D * 4, 7.0)
        edit(shard, bad)
        ds = ctxshard.open(d)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.window(0, 2)  # served 7.0 as padding before
        self.assertIn("guard row", str(cm.exception))
        self.assertEqual(np.asarray(ds.window(10, 2)).size, 5 * D)  # inside: served
        # the gather writes its own zeros: unaffected
        x = ds.gather(np.array([0], dtype=np.uint64), 2)
        self.assertFalse(np.asarray(x).reshape(5, D)[:2].any())
        ds.close()

    def test_forged_statistics_fail_verify(self):
        d = copy("forgedstats")
        man = os.path.join(d, "manifest.cxs")

        def forge(data):
            off, _, _ = sections(data)[SEC_STATS]
            struct.pack_into("<d", data, off + 32, -1e6)        # mean of dimension 0
            struct.pack_into("<d", data, off + 32 + 8 * 8, 1e-80)  # its variance
            rehash(data)
        edit(man, forge)
        ds = ctxshard.open(d)  # finite statistics: open accepts them
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.verify()
        msg = str(cm.exception)
        self.assertIn("STATS", msg)
        self.assertIn("dimension 0", msg)
        ds.close()
        p = run("verify", d)
        self.assertEqual(p.returncode, 1, p.stdout)
        self.assertIn("STATS: dimension 0", p.stderr)

    def test_verify_locates_damaged_features(self):
        # with block sums (the default): the block and its utterances
        d = copy("badblock")
        ds = ctxshard.open(d)
        uid = ds.utterance(7)[0]
        first = ds.utterance_frames(7)[0]
        G, D = ds.guard, ds.dim
        ds.close()

        def small(data):
            off, _, _ = sections(data)[SEC_FEATURES]
            row = G * (7 + 1) + first + 4
            data[off + row * D * 4] ^= 0x01  # the mantissa's last bit: plausible
        edit(os.path.join(d, SHARD), small)
        p = run("verify", d)
        self.assertEqual(p.returncode, 1)
        self.assertIn("FEATURES block ", p.stderr)
        self.assertIn(f"utterance {uid}", p.stderr)  # was "cannot say which utterance"
        ds = ctxshard.open(d)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.verify()
        self.assertIn(f"utterance {uid}", str(cm.exception))
        ds.close()
        # without them (a dataset of format 1.2 or --block-sums off): the
        # values that are implausible, or said plainly that it cannot
        d = copy("badfeat", "nosums")
        shard = os.path.join(d, SHARD)
        ds = ctxshard.open(d)
        uid = ds.utterance(7)[0]
        first = ds.utterance_frames(7)[0]
        G, D = ds.guard, ds.dim
        ds.close()

        def bad(data):
            off, _, _ = sections(data)[SEC_FEATURES]
            # frame 4 of utterance 7: rows are guards, then utterances, each with a guard after
            row = G * (7 + 1) + first + 4
            struct.pack_into("<f", data, off + row * D * 4 + 4 * 2, 3e30)  # finite, absurd
        edit(shard, bad)
        p = run("verify", d)
        self.assertEqual(p.returncode, 1)
        self.assertIn("FEATURES", p.stderr)
        self.assertIn(f"utterance {uid}", p.stderr)
        self.assertIn("frame 4, dimension 2", p.stderr)
        # damage that leaves every value plausible: said plainly
        d2 = copy("badfeat2", "nosums")

        def small(data):
            off, _, _ = sections(data)[SEC_FEATURES]
            row = G * (7 + 1) + first + 4
            data[off + row * D * 4] ^= 0x01  # the mantissa's last bit
        edit(os.path.join(d2, SHARD), small)
        p = run("verify", d2)
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot say which utterance", p.stderr)


class BlockSums(unittest.TestCase):
    """Format 1.3: a checksum per block of the features, labels and tables."""

    def damaged(self, name, u=11, t=9):
        d = copy(name)
        ds = ctxshard.open(d)
        uid, first = ds.utterance(u)[0], ds.utterance_frames(u)[0]
        G, D = ds.guard, ds.dim
        ds.close()

        def small(data):
            off, _, _ = sections(data)[SEC_FEATURES]
            data[off + (G * (u + 1) + first + t) * D * 4 + 4] ^= 0x01
        edit(os.path.join(d, SHARD), small)
        return d, uid

    def test_info(self):
        for name, minor, shards, line in (("plain", 3, 1, "per section and per block"),
                                          ("nosums", 0, 0, "per section only")):
            ds = ctxshard.open(os.path.join(TMP, name))
            self.assertEqual(ds.info["format_minor"], minor)
            self.assertEqual(ds.info["block_sum_shards"], shards)
            ds.close()
            self.assertIn(line, run("info", os.path.join(TMP, name)).stdout)
        p = run("pack", RAW, os.path.join(TMP, "never"), "--block-sums", "maybe")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--block-sums: 'maybe' is not on or off", p.stderr)

    def test_warm_stops_at_damaged_block(self):
        d, uid = self.damaged("warmbad")
        ds = ctxshard.open(d)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.warm(force=True)  # returned the figures before: nothing was checked
        self.assertIn(f"utterance {uid}", str(cm.exception))
        self.assertIn("FEATURES block ", str(cm.exception))
        # the same in the library's thread: wait() raises it
        w = ds.warm(force=True, background=True)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            w.wait()
        self.assertIn(f"utterance {uid}", str(cm.exception))
        self.assertIsNone(w.stop())  # ended in failure: no figures
        ds.close()
        p = run("warm", d, "--force")
        self.assertEqual(p.returncode, 1)
        self.assertIn(f"utterance {uid}", p.stderr)

    def test_block_loader_never_serves_damaged_block(self):
        d, uid = self.damaged("loaderbad", u=30)
        ds = ctxshard.open(d)
        u0, n = ds.utterance_frames(30)
        ds.close()
        served = 0
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            for _ in cxt.Loader(d, context=2, batch_size=64, shuffle="block", memory="2M",
                                threads=2):
                served += 1
        msg = str(cm.exception)
        self.assertIn(f"utterance {uid}", msg)
        self.assertIn("not served", msg)
        # (the first batches of a start, which do not wait for the block
        # reader, check the blocks they gather from themselves)
        self.assertLess(served, 50)
        # the same through the command
        p = run("bench-read", d, "--sampler", "block", "--memory", "2M", "--batch", "64")
        self.assertEqual(p.returncode, 1)
        self.assertIn(f"utterance {uid}", p.stderr)

    def test_damage_no_check_can_tell_is_served_by_no_loader(self):
        """One LABELS byte changed to another valid symbol, or one low bit
        of one feature value flipped: every loader and order stops at the
        batch that needs the block (CXS_E_CHECKSUM, naming the block and the
        utterances it holds); it served the damage for a whole epoch
        before."""
        u, t = 17, 5
        kinds = {}
        d, uid = self.damaged("anyvalue", u=u, t=t)
        kinds["FEATURES"] = d
        d = copy("anylabel")
        ds = ctxshard.open(d)
        first, V = ds.utterance_frames(u)[0], len(ds.vocab)
        ds.close()

        def relabel(data):
            off, _, _ = sections(data)[SEC_LABELS]
            data[off + first + t] = (data[off + first + t] + 1) % V  # another valid symbol
        edit(os.path.join(d, SHARD), relabel)
        kinds["LABELS"] = d
        loaders = {
            "shuffle": lambda p: cxt.Loader(p, 2, 64, threads=2),
            "sequential": lambda p: cxt.Loader(p, 2, 64, shuffle=False, threads=2),
            "block": lambda p: cxt.Loader(p, 2, 64, shuffle="block", memory="2M", threads=2),
            "emulated GPU resident": lambda p: cxt.Loader(p, 2, 64, gpu_emulate=True,
                                                          gpu_mode="resident"),
            "emulated GPU stream": lambda p: cxt.Loader(p, 2, 64, gpu_emulate=True,
                                                        gpu_mode="stream"),
            "utterances": lambda p: cxt.UtteranceLoader(p, 4000, threads=2),
            "utterances, block mode": lambda p: cxt.UtteranceLoader(p, 4000, memory="2M",
                                                                    threads=2),
            "emulated GPU utterances": lambda p: cxt.UtteranceLoader(p, 4000, gpu_emulate=True),
            "mixture": lambda p: cxt.Loader([os.path.join(TMP, "plain"), p], 2, 64, threads=2),
            "utterance mixture": lambda p: cxt.UtteranceLoader([os.path.join(TMP, "plain"), p],
                                                               4000, threads=2),
        }
        for section, d in kinds.items():
            for name, make in loaders.items():
                with self.subTest(section=section, loader=name):
                    with self.assertRaises(ctxshard.CtxshardError) as cm:
                        for _ in make(d):
                            pass
                    msg = str(cm.exception)
                    self.assertIn(f"{section} block ", msg)
                    self.assertIn("checksum mismatch", msg)
            # the dataset's own calls
            ds = ctxshard.open(d)
            with self.assertRaises(ctxshard.CtxshardError):
                ds.gather(np.arange(ds.num_frames, dtype=np.uint64), 2, labels=True)
            ds.close()
            ds = ctxshard.open(d)
            with self.assertRaises(ctxshard.CtxshardError):
                for i in range(ds.num_utterances):
                    ds.utterance(i)
            ds.close()

    def test_writer_flag_and_same_features(self):
        ds = ctxshard.open(os.path.join(TMP, "plain"))
        outs = []
        for on in (True, False):
            out = os.path.join(TMP, f"w-{on}")
            with ctxshard.Writer(out, dim=ds.dim, block_sums=on) as w:
                for u in range(5):
                    w.add(ds.utterance(u)[0], np.asarray(ds.utterance(u)[1]))
            outs.append(out)
        ds.close()
        a = [ctxshard.open(o) for o in outs]
        self.assertEqual([x.info["format_minor"] for x in a], [3, 0])
        self.assertEqual([x.info["block_sum_shards"] for x in a], [1, 0])
        for x in a:
            x.verify()
            x.close()
        fa, fb = (bytearray(open(os.path.join(o, SHARD), "rb").read()) for o in outs)
        oa, la, _ = sections(fa)[SEC_FEATURES]
        ob, lb, _ = sections(fb)[SEC_FEATURES]
        self.assertEqual(fa[oa:oa + la], fb[ob:ob + lb])
        self.assertNotIn(9, sections(fb))
        with self.assertRaises(TypeError):
            ctxshard.Writer(os.path.join(TMP, "w-bad"), block_sums="yes")

    def test_merge_refuses_parts_that_differ(self):
        parts = []
        for i, extra in ((1, ()), (2, ("--block-sums", "off"))):
            out = os.path.join(TMP, f"part{i}")
            p = run("pack", RAW, out, "--part", f"{i}/2", "--shard-size", "512K", "--quiet",
                    *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            parts.append(out)
        p = run("merge", *parts, os.path.join(TMP, "merged"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("part2 was packed with --block-sums off, ", p.stderr)
        self.assertIn("part1 with --block-sums on; refusing to merge", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(TMP, "merged")))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
