"""Compressed datasets, convert, and packing in parts.

- compressed vs uncompressed: every frame's window (k beyond the guard, so
  windows cross chunks) and label identical, for float32/float16/bfloat16,
  with and without the shuffle filter, several chunk sizes, cache on and off;
- convert both ways byte-identical to packing directly in that form;
- damaged chunks: verify names the chunk, the reader returns an error for
  any window touching it and serves the others;
- pack --part I/N + merge of 1, 2, 3 and 7 parts byte-identical to one pack
  (also compressed, and with --on-error skip where shards must be
  renumbered); mismatched or missing parts refused with a clear message.

usage: /usr/bin/python3 tests/cli/scale_test.py BUILD/tools/ctxshard BUILD/lib/libctxshard.so SOURCE_ROOT"""
import ctypes
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

EXE = os.path.abspath(sys.argv[1])
os.environ["CTXSHARD_LIB"] = os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(os.path.abspath(sys.argv[3]), "python"))
sys.path.insert(0, os.path.join(os.path.abspath(sys.argv[3]), "tests", "python"))
import ctxshard  # noqa: E402
from testenv import same_dataset  # noqa: E402

SEC_ZFEATURES, SEC_CHUNKS = 6, 7


def run(*args):
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def ok(*args):
    rc, out, err = run(*args)
    if rc:
        raise AssertionError(f"ctxshard {' '.join(map(str, args))}: exit {rc}\n{err}")
    return out


def sections(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<I", data, 24)[0]
    return {struct.unpack_from("<I", data, 64 + 32 * i)[0]:
            struct.unpack_from("<QQ", data, 64 + 32 * i + 8) for i in range(n)}


class Scale(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.raw = os.path.join(cls.tmp, "raw")
        ok("synth", cls.raw, "--utts", 60, "--seed", 11, "--quiet")
        cls.plain = os.path.join(cls.tmp, "plain")
        ok("pack", cls.raw, cls.plain, "--shard-size", "400K", "--guard", 8, "--quiet")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def path(self, name):
        p = os.path.join(self.tmp, name)
        shutil.rmtree(p, ignore_errors=True)
        return p

    def all_windows(self, path, k, cache=None):
        ds = ctxshard.open(path, cache_bytes=cache)
        frames = np.arange(len(ds))
        x, y = ds.gather(frames, k, labels=True, threads=2)
        return ds, x, y

    # ---- compressed form ------------------------------------------------
    def test_windows_identical(self):
        for dtype in ("f32", "f16", "bf16"):
            ref = self.path("ref-" + dtype)
            ok("pack", self.raw, ref, "--shard-size", "400K", "--guard", 8, "--dtype", dtype,
               "--quiet")
            _, x0, y0 = self.all_windows(ref, 12)
            for opts, cache in ((["--compress", "zstd"], None),
                                (["--compress", "zstd:1", "--chunk-size", "1K"], 0),
                                (["--compress", "zstd:9", "--no-shuffle", "--chunk-size", "40K"],
                                 1 << 16)):
                with self.subTest(dtype=dtype, opts=opts, cache=cache):
                    z = self.path("z-" + dtype)
                    ok("pack", self.raw, z, "--shard-size", "400K", "--guard", 8, "--dtype",
                       dtype, *opts, "--quiet")
                    self.assertIn(SEC_ZFEATURES, sections(os.path.join(z, "shard-000000.cxs")))
                    ds, x, y = self.all_windows(z, 12, cache)
                    self.assertTrue(ds.compressed)
                    np.testing.assert_array_equal(x, x0)
                    np.testing.assert_array_equal(y, y0)
                    ref_ds = ctxshard.open(ref)
                    for u in (0, 17, ds.num_utterances - 1):
                        np.testing.assert_array_equal(ds.utterance(u)[1], ref_ds.utterance(u)[1])
                    with self.assertRaises(ValueError):
                        ds.window(0, 1)
                    out = ok("verify", z)
                    self.assertIn("OK", out)

    def test_info_and_version(self):
        # without block sums: a compressed dataset is 1.1, a plain one 1.0
        z = self.path("zinfo")
        ok("pack", self.raw, z, "--compress", "zstd:5", "--chunk-size", "8K", "--quiet",
           "--block-sums", "off")
        info = ok("info", z)
        self.assertIn("format        1.1", info)
        self.assertIn("zstd level 5", info)
        with open(os.path.join(z, "manifest.cxs"), "rb") as f:
            self.assertEqual(f.read(12)[8:12], b"\x01\x00\x01\x00")  # 1.1
        p = self.path("pinfo")
        ok("pack", self.raw, p, "--quiet", "--block-sums", "off")
        with open(os.path.join(p, "manifest.cxs"), "rb") as f:
            self.assertEqual(f.read(12)[8:12], b"\x01\x00\x00\x00")  # plain stays 1.0
        # with them (the default), 1.3 either way
        z = self.path("zinfo13")
        ok("pack", self.raw, z, "--compress", "zstd:5", "--chunk-size", "8K", "--quiet")
        self.assertIn("format        1.3", ok("info", z))
        for d in (z, self.plain):
            with open(os.path.join(d, "manifest.cxs"), "rb") as f:
                self.assertEqual(f.read(12)[8:12], b"\x01\x00\x03\x00")  # 1.3

    # ---- convert ----------------------------------------------------------
    def test_convert_both_ways(self):
        for opts in (["--compress", "zstd"], ["--compress", "zstd:7", "--chunk-size", "3K",
                                              "--no-shuffle"]):
            with self.subTest(opts=opts):
                direct = self.path("direct")
                ok("pack", self.raw, direct, "--shard-size", "400K", "--guard", 8, *opts,
                   "--quiet")
                conv = self.path("conv")
                ok("convert", self.plain, conv, *opts, "--quiet")
                self.assertIsNone(same_dataset(direct, conv))
                back = self.path("back")
                ok("convert", conv, back, "--no-compress", "--quiet")
                self.assertIsNone(same_dataset(self.plain, back))

    def test_convert_usage(self):
        rc, _, err = run("convert", self.plain, self.path("x"))
        self.assertEqual(rc, 2)
        self.assertIn("--compress", err)
        rc, _, err = run("convert", os.path.join(self.plain, "shard-000000.cxs"),
                         self.path("x"), "--compress", "zstd")
        self.assertEqual(rc, 2)
        self.assertIn("convert needs the dataset directory", err)

    # ---- damage -----------------------------------------------------------
    def test_corrupt_chunk(self):
        z = self.path("zbad")
        ok("pack", self.raw, z, "--shard-size", "400K", "--guard", 8, "--compress", "zstd",
           "--chunk-size", "4K", "--quiet")
        _, x0, _ = self.all_windows(self.plain, 12)
        shard = os.path.join(z, "shard-000001.cxs")
        off, length = sections(shard)[SEC_ZFEATURES]
        chunks_off, _ = sections(shard)[SEC_CHUNKS]
        data = bytearray(open(shard, "rb").read())
        end0, end1 = struct.unpack_from("<QQ", data, chunks_off + 64)[0], \
            struct.unpack_from("<Q", data, chunks_off + 64 + 16)[0]
        data[off + end0 + (end1 - end0) // 2] ^= 0x10  # inside chunk 1
        open(shard, "wb").write(bytes(data))
        rc, _, err = run("verify", z)
        self.assertEqual(rc, 1)
        self.assertIn("shard-000001.cxs", err)
        self.assertTrue("chunk 1" in err or "checksum mismatch" in err, err)
        ds = ctxshard.open(z, cache_bytes=0)  # open does not read the chunks
        first_frame = ds.utterance_frames(0)[0]
        # Frames of shard 1: find them; any whose window touches chunk 1 fails.
        s1 = [u for u in range(ds.num_utterances) if ds._utt(u).shard == 1]
        f_lo = ds.utterance_frames(s1[0])[0]
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.gather(np.arange(f_lo, f_lo + 200), 12)
        self.assertIn("checksum", str(cm.exception))
        # Other shards still serve exact windows.
        x = ds.gather(np.arange(first_frame, first_frame + 100), 12)
        np.testing.assert_array_equal(x, x0[:100])
        del ds

    def test_corrupt_chunk_table(self):
        z = self.path("ztab")
        ok("pack", self.raw, z, "--compress", "zstd", "--quiet")
        shard = os.path.join(z, "shard-000000.cxs")
        off, _ = sections(shard)[SEC_CHUNKS]
        data = bytearray(open(shard, "rb").read())
        data[off + 64 + 3] ^= 1
        open(shard, "wb").write(bytes(data))
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ctxshard.open(z)
        self.assertIn("CHUNKS", str(cm.exception))

    # ---- parts ------------------------------------------------------------
    def parts(self, raw, n, *opts, prefix="p"):
        dirs = []
        for i in range(1, n + 1):
            d = self.path(f"{prefix}{i}")
            ok("pack", raw, d, "--part", f"{i}/{n}", *opts, "--quiet")
            self.assertTrue(os.path.exists(os.path.join(d, "part.cxs")))
            dirs.append(d)
        return dirs

    def test_merge_identical(self):
        for opts in ([], ["--compress", "zstd", "--dtype", "f16"]):
            single = self.path("single")
            ok("pack", self.raw, single, "--shard-size", "200K", *opts, "--quiet")
            nshards = len([n for n in os.listdir(single) if n.startswith("shard-")])
            self.assertGreater(nshards, 7)
            for n in (1, 2, 3, 7):
                with self.subTest(opts=opts, parts=n):
                    dirs = self.parts(self.raw, n, "--shard-size", "200K", *opts)
                    out = self.path("merged")
                    # any order on the command line
                    ok("merge", *reversed(dirs), out, "--quiet")
                    self.assertIsNone(same_dataset(single, out))
                    ok("verify", out)
                    for d in dirs:  # the parts stay valid (linked, not moved)
                        self.assertTrue(os.path.exists(os.path.join(d, "part.cxs")))

    def test_parts_share_the_work(self):
        # The whole set is one shard at the default 1G: without --shard-size, N parts choose a
        # shard size that gives each of them shards of about the same size, and say which
        # single pack the merge equals.
        for n in (3, 7):
            with self.subTest(parts=n):
                dirs, sizes = [], set()
                for i in range(1, n + 1):
                    d = self.path(f"w{i}")
                    rc, out, err = run("pack", self.raw, d, "--part", f"{i}/{n}")
                    self.assertEqual(rc, 0, err)
                    m = re.search(r"shards of at most (\S+) \(not 1G\), so that each of the "
                                  rf"{n} parts has about the same work; merge gives the bytes "
                                  rf"of `ctxshard pack {re.escape(self.raw)} OUT --shard-size "
                                  r"(\S+)`", err)
                    self.assertTrue(m, err)
                    sizes.add(m.group(2))
                    self.assertRegex(out, rf"packed part {i} of {n}: shards \d+\.\.\d+ of {n} ")
                    self.assertNotIn("empty", out)
                    dirs.append(d)
                self.assertEqual(len(sizes), 1)
                single = self.path("single2")
                ok("pack", self.raw, single, "--shard-size", sizes.pop(), "--quiet")
                self.assertEqual(len([x for x in os.listdir(single) if x.startswith("shard-")]), n)
                out = self.path("merged2")
                ok("merge", *dirs, out, "--quiet")
                self.assertIsNone(same_dataset(single, out))

    def test_parts_refuse_a_shard_size_that_idles_them(self):
        out = self.path("idle")
        rc, _, err = run("pack", self.raw, out, "--part", "2/4", "--shard-size", "1G")
        self.assertEqual(rc, 2, err)
        m = re.search(r"--part 2/4: --shard-size 1G lays \S+ out in 1 shard, so 3 of the 4 parts "
                      r"would have nothing to pack; give --shard-size (\S+) or less, or leave "
                      r"--shard-size out \(pack then chooses it for 4 parts\); nothing written",
                      err)
        self.assertTrue(m, err)
        self.assertFalse(os.path.exists(out))
        ok("pack", self.raw, out, "--part", "2/4", "--shard-size", m.group(1), "--quiet")
        self.assertEqual(len([x for x in os.listdir(out) if x.startswith("shard-")]), 1)

    def test_empty_part_says_so(self):
        raw = self.path("raw3")
        ok("synth", raw, "--utts", 2, "--quiet")
        dirs = []
        for i in (1, 2, 3):
            d = self.path(f"e{i}")
            rc, out, err = run("pack", raw, d, "--part", f"{i}/3")
            self.assertEqual(rc, 0, err)
            if i == 1:  # parts 2 and 3 get the two shards
                self.assertIn(f"{d}: part 1 of 3 has nothing to pack: the 2 utterances of {raw} "
                              "make only 2 shards, fewer than 3 parts; it is written empty "
                              "because merge needs every part", err)
                self.assertIn("packed part 1 of 3: empty (the layout has 2 shards for 3 parts); "
                              "merge still needs it", out)
                self.assertNotIn("packed 0", out)
            else:
                self.assertNotIn("nothing to pack", err)
            dirs.append(d)
        ok("merge", *dirs, self.path("e"), "--quiet")

    def test_merge_with_skips_renumbers(self):
        raw = self.path("rawskip")
        shutil.copytree(self.raw, raw)
        ids = sorted(n[:-4] for n in os.listdir(os.path.join(raw, "mfcc")))
        for uid in ids[:12]:  # spoil the first utterances: whole shards vanish
            x = np.load(os.path.join(raw, "mfcc", uid + ".npy"))
            x[1, 1] = np.nan
            np.save(os.path.join(raw, "mfcc", uid + ".npy"), x)
        opts = ["--shard-size", "150K", "--on-error", "skip"]
        single = self.path("single3")
        ok("pack", raw, single, *opts, "--quiet")
        for n in (2, 3, 7):
            with self.subTest(parts=n):
                dirs = self.parts(raw, n, *opts)
                out = self.path("merged3")
                msg = ok("merge", *dirs, out, "--move")
                self.assertIn("copied", msg)
                self.assertIsNone(same_dataset(single, out))
                self.assertEqual(len(ctxshard.open(out).skipped), 12)
                for d in dirs:
                    self.assertFalse(os.path.exists(d), "--move leaves the parts")

    def test_merge_refusals(self):
        a = self.parts(self.raw, 2, prefix="ra")
        b = self.parts(self.raw, 2, "--dtype", "f16", prefix="rb")
        c = self.parts(self.raw, 3, prefix="rc")
        g = self.parts(self.raw, 2, "--guard", "8", prefix="rg")
        s = self.parts(self.raw, 2, "--shard-size", "200K", prefix="rs")
        t = self.parts(self.raw, 2, "--shard-size", "300K", prefix="rt")
        out = self.path("refused")
        cases = [
            ([a[0]], "every part is needed"),
            ([a[0], a[0]], "both part 1"),
            ([a[1], a[1]], "part 1 of 2 is missing"),
            ([c[1], c[2], c[2]], "part 1 of 3 is missing"),
            ([c[0], c[2], c[2]], "part 2 of 3 is missing"),
            # the option that differs, with both values (not "different inputs", although
            # these options change the shard layout too)
            ([a[0], b[1]], f"{b[1]} was packed with --dtype f16, {a[0]} with --dtype f32"),
            ([a[0], g[1]], f"{g[1]} was packed with --guard 8, {a[0]} with --guard 64"),
            ([s[0], t[1]], f"{t[1]} was packed with --shard-size 300K, {s[0]} with --shard-size "
                           "200K"),
            ([a[0], c[1]], "different number of parts"),
            ([a[0], self.plain], "a complete dataset, not a part"),
        ]
        raw2 = self.path("raw2")
        shutil.copytree(self.raw, raw2)
        victim = sorted(os.listdir(os.path.join(raw2, "mfcc")))[-1]
        x = np.load(os.path.join(raw2, "mfcc", victim))
        np.save(os.path.join(raw2, "mfcc", victim), x[:-3])
        t = np.load(os.path.join(raw2, "transcript", victim))
        np.save(os.path.join(raw2, "transcript", victim), np.concatenate([t[:-4], t[-1:]]))
        d = self.parts(raw2, 2, prefix="rd")
        cases.append(([a[0], d[1]], "different inputs"))
        z = self.parts(self.raw, 2, "--compress", "zstd", prefix="rz")
        cases.append(([a[0], z[1]], f"{z[1]} was packed with --compress zstd, {a[0]} with "
                                    "--compress none"))
        # Block sums: a float part says by part.cxs's minor version, a coded
        # part (minor 4 either way) by its shards' sections (spec section 10)
        bo = self.parts(self.raw, 2, "--block-sums", "off", prefix="rbo")
        cases.append(([a[0], bo[1]], f"{bo[1]} was packed with --block-sums off, {a[0]} with "
                                     "--block-sums on"))
        for dtype in ("q8", "q16"):
            q = self.parts(self.raw, 2, "--dtype", dtype, prefix=f"r{dtype}")
            qo = self.parts(self.raw, 2, "--dtype", dtype, "--block-sums", "off",
                            prefix=f"r{dtype}o")
            cases.append(([q[0], qo[1]], f"{qo[1]} was packed with --block-sums off, {q[0]} "
                                         "with --block-sums on"))
            cases.append(([qo[0], q[1]], f"{q[1]} was packed with --block-sums on, {qo[0]} "
                                         "with --block-sums off"))
            # parts that agree still merge, into shards without block sums
            merged = self.path(f"merged-{dtype}-off")
            ok("merge", *qo, merged)
            ok("verify", merged)
            for name in os.listdir(merged):
                if name.startswith("shard-"):
                    self.assertNotIn(9, sections(os.path.join(merged, name)))
        for dirs, needle in cases:
            with self.subTest(needle=needle):
                rc, _, err = run("merge", *dirs, out)
                self.assertEqual(rc, 1, err)
                self.assertIn(needle, err)
                self.assertFalse(os.path.exists(out))
        # A part is not a dataset.
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ctxshard.open(a[0])
        self.assertIn("partial dataset", str(cm.exception))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[4:], verbosity=1)
