"""Hostile raw inputs: sizes that overflow, headers past the end, absurd
dimensions, huge sparse files, deep trees, symlink loops, FIFOs and
devices, odd file names.  Each gets a clear message naming the file, in
bounded memory (the packer runs under a 1 GiB address-space limit, and its
peak RSS is checked), and never a crash or a hang.

usage: /usr/bin/python3 tests/cli/hostile_test.py BUILD/tools/ctxshard"""
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

EXE = os.path.abspath(sys.argv[1])
# Under AddressSanitizer the address space is mostly shadow: no limit there,
# and its own memory overhead makes RSS meaningless.
SANITIZED = b"libasan" in subprocess.run(["ldd", EXE], capture_output=True).stdout


def limited():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def run(*args):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, timeout=60,
                       preexec_fn=limited)
    return p.returncode, p.stdout, p.stderr, max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)


def npy_header(descr, shape, version=1):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    hl = len(d) + 1
    pad = (64 - (10 + hl) % 64) % 64
    body = (d + " " * pad + "\n").encode()
    if version == 1:
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(body)) + body


class Hostile(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ctxshard-hostile-")
        self.raw = os.path.join(self.tmp, "raw")
        rc = run("synth", self.raw, "--utts", 3, "--seed", 1, "--quiet")[0]
        self.assertEqual(rc, 0)
        self.ids = sorted(n[:-4] for n in os.listdir(os.path.join(self.raw, "mfcc")))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def mfcc(self, uid):
        return os.path.join(self.raw, "mfcc", uid + ".npy")

    def trans(self, uid):
        return os.path.join(self.raw, "transcript", uid + ".npy")

    def refused(self, path, needle, max_rss_mb=200):
        out = os.path.join(self.tmp, "out")
        rc, _, err, rss = run("pack", self.raw, out, "--quiet")
        self.assertEqual(rc, 1, err)
        self.assertIn(path, err)
        self.assertIn(needle, err)
        self.assertFalse(os.path.exists(out))
        if not SANITIZED:
            self.assertLess(rss / 1024, max_rss_mb, "peak RSS")
        rc, _, err, _ = run("check", self.raw)
        self.assertEqual(rc, 1)
        self.assertIn(needle, err)

    def test_shape_overflows(self):
        p = self.mfcc(self.ids[0])
        open(p, "wb").write(npy_header("<f4", "(4611686018427387904, 28)") + b"\0" * 64)
        self.refused(p, "overflows 64 bits")

    def test_shape_claims_more_than_the_file(self):
        p = self.mfcc(self.ids[0])
        open(p, "wb").write(npy_header("<f4", "(100000000, 28)") + b"\0" * 64)
        self.refused(p, "truncated: the header promises 11200000000 data bytes")

    def test_header_length_past_the_end(self):
        p = self.mfcc(self.ids[0])
        open(p, "wb").write(b"\x93NUMPY\x02\x00" + struct.pack("<I", 0xFFFFFFF0) + b"{}")
        self.refused(p, "truncated: header claims 4294967280 bytes")

    def test_negative_and_huge_dims(self):
        p = self.mfcc(self.ids[0])
        open(p, "wb").write(npy_header("<f4", "(-5, 28)"))
        self.refused(p, "negative dimension")
        open(p, "wb").write(npy_header("<f4", "(1, 1000000)") + b"\0" * 4000000)
        self.refused(p, "feature dimension 1000000, expected 1..65536")

    def test_huge_sparse_feature_file(self):
        p = self.mfcc(self.ids[1])
        with open(p, "wb") as f:
            f.write(npy_header("<f4", "(20000000, 28)"))
            f.truncate(f.tell() + 20000000 * 28 * 4)  # 2.2 GB, sparse
        self.refused(p, "more than an utterance's features can be")

    def test_two_gigabyte_transcript_string(self):
        p = self.trans(self.ids[1])
        with open(p, "wb") as f:
            f.write(npy_header("<U536870912", "(1,)"))
            f.truncate(f.tell() + 536870912 * 4)  # one 2 GiB string, sparse
        self.refused(p, "more than a transcript of this utterance's length can be")
        T = 10  # a short utterance: its transcript is small enough to read ...
        np.save(self.mfcc(self.ids[1]), np.ones((T, 28), np.float32))
        with open(p, "wb") as f:  # ... but its symbols are absurdly wide
            f.write(npy_header("<U4096", "(%d,)" % (T + 2)))
            f.truncate(f.tell() + (T + 2) * 4096 * 4)
        self.refused(p, "a phoneme symbol is at most 1024 characters")

    def test_symlink_loop(self):
        p = self.mfcc(self.ids[2])
        os.remove(p)
        os.symlink(os.path.basename(p), p)
        self.refused(p, "Too many levels of symbolic links")
        out = os.path.join(self.tmp, "out")
        rc, _, err, _ = run("pack", self.raw, out, "--on-error", "skip", "--quiet")
        self.assertEqual(rc, 0, err)

    def test_fifo_and_device(self):
        p = self.mfcc(self.ids[0])
        os.remove(p)
        os.mkfifo(p)  # must not hang waiting for a writer
        self.refused(p, "not a regular file")
        os.remove(p)
        os.symlink("/dev/zero", p)
        self.refused(p, "not a regular file")

    def test_directory_named_like_a_file_and_deep_trees(self):
        p = self.mfcc(self.ids[0])
        os.remove(p)
        os.mkdir(p)
        self.refused(p, "not a regular file")
        os.rmdir(p)
        np.save(p, np.ones((10, 28), np.float32))
        np.save(self.trans(self.ids[0]), np.array(["[SOS]"] + ["AA"] * 10 + ["[EOS]"]))
        deep = os.path.join(self.raw, "mfcc")
        for i in range(100):  # subdirectories are not descended into
            deep = os.path.join(deep, "d")
            os.mkdir(deep)
        open(os.path.join(deep, "x.npy"), "w").write("junk")
        rc, _, err, _ = run("pack", self.raw, os.path.join(self.tmp, "out"), "--quiet")
        self.assertEqual(rc, 0, err)

    def test_odd_file_names(self):
        x = np.load(self.mfcc(self.ids[0]))
        t = np.load(self.trans(self.ids[0]))
        odd = b"caf\xc3\xa9 \xff\xfe-utt"  # a space, UTF-8 and invalid UTF-8
        for d, arr in (("mfcc", x), ("transcript", t)):
            with open(os.path.join(os.fsencode(self.raw), d.encode(), odd + b".npy"), "wb") as f:
                np.save(f, arr)
        out = os.path.join(self.tmp, "out")
        rc, _, err, _ = run("pack", self.raw, out, "--quiet")
        self.assertEqual(rc, 0, err)
        rc, js, _, _ = run("info", out, "--json")
        self.assertEqual(rc, 0)
        self.assertEqual(run("verify", out)[0], 0)
        bad = os.path.join(os.fsencode(self.raw), b"mfcc", b"new\nline.npy")
        with open(bad, "wb") as f:
            np.save(f, x)
        rc, _, err, _ = run("check", self.raw)
        self.assertEqual(rc, 1)
        self.assertIn("utterance id holds control byte 0x0a", err)

    def test_raw_is_a_file_or_missing(self):
        rc, _, err, _ = run("pack", self.mfcc(self.ids[0]), os.path.join(self.tmp, "o"))
        self.assertEqual(rc, 1)
        self.assertIn("not a directory", err)
        rc, _, err, _ = run("check", os.path.join(self.tmp, "x" * 5000))
        self.assertEqual(rc, 1)
        self.assertIn("File name too long", err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
