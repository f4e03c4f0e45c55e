"""A q8 dataset streamed from a URL (CXS_OPEN_STREAM, nginx on 127.0.0.1):
open fetches the metadata alone, QHEADERS with it; the frame Loader in
block order and the utterance loader in block mode serve exactly what the
local copy serves, each feature byte fetched once; a header the writer
cannot have written (its checksums made to agree, so that open takes it)
stops the epoch at its first use, naming the shard and the utterance.

usage: /usr/bin/python3 tests/python/qstream_test.py BUILD_DIR SOURCE_ROOT"""
import os
import shutil
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stream_test as S  # noqa: E402  (nginx, make, the section helpers)

import torch  # noqa: E402

import ctxshard  # noqa: E402
from ctxshard.torch import Loader, UtteranceLoader  # noqa: E402

R = S.R
D = __import__("damage_test")  # its forging helpers (sections, rehash, xxh3)
QHEADERS, BLOCKSUMS, SHARD_TABLE = 10, 9, 17


def bad_header(ds_dir, shard, number, lu, dim):
    """Local utterance lu's q8 header of shard (the dataset's shard number)
    given range -1 (what no writer writes), and every checksum over it made
    to agree: QHEADERS's block sums, every section checksum and the shard
    header's, and the manifest's record of that header."""
    path = os.path.join(ds_dir, shard)
    data = bytearray(open(path, "rb").read())
    s = D.sections(data)
    qo, ql, _ = s[QHEADERS]
    struct.pack_into("<f", data, qo + lu * (8 + 8 * dim) + 4, -1.0)
    bo = s[BLOCKSUMS][0]
    count = struct.unpack_from("<I", data, bo)[0]
    for i in range(count):
        t, shift, nb, first = struct.unpack_from("<IIQQ", data, bo + 8 + 24 * i)
        if t == QHEADERS:
            for j in range(nb):
                blk = data[qo + (j << shift):qo + min(ql, (j + 1) << shift)]
                struct.pack_into("<Q", data, bo + 8 + 24 * count + 8 * (first + j), D.xxh3(blk))
    D.rehash(data)
    open(path, "wb").write(data)
    man = os.path.join(ds_dir, "manifest.cxs")
    m = bytearray(open(man, "rb").read())
    to = D.sections(m)[SHARD_TABLE][0]
    struct.pack_into("<Q", m, to + 64 * number + 8, struct.unpack_from("<Q", data, 56)[0])
    D.rehash(m)
    open(man, "wb").write(m)


def tearDownModule():
    shutil.rmtree(D.TMP)
    shutil.rmtree(R.TMP)


class StreamedQ8(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # the web root (nginx's workers read it): the dataset and a copy
        # with one bad header
        cls.a = S.make("q8s", "--dtype", "q8", "--shard-size", "256K")
        cls.www = os.path.join(R.TMP, "qwww")
        cls.dmg = os.path.join(cls.www, "dmg")
        shutil.copytree(cls.a, os.path.join(cls.www, "q8s"))
        shutil.copytree(cls.a, cls.dmg)
        os.chmod(cls.www, 0o755)
        with ctxshard.open(cls.a) as ds:
            cls.dim = ds.dim
            u = ds.num_utterances // 2
            cls.victim = ds.utterance(u)[0]
            # the shard holding utterance u and its number there
            shards = sorted(f for f in os.listdir(cls.a) if f.startswith("shard-"))
            n0 = 0
            for number, f in enumerate(shards):
                with ctxshard.open(os.path.join(cls.a, f)) as one:
                    if u < n0 + one.num_utterances:
                        cls.shard, lu = f, u - n0
                        break
                    n0 += one.num_utterances
        bad_header(cls.dmg, cls.shard, number, lu, cls.dim)
        cls.ng = R.Nginx(cls.www)

    @classmethod
    def tearDownClass(cls):
        cls.ng.stop()

    def served(self, since):
        return sum(b for p, st, b in self.ng.requests()[since:] if p.startswith("/q8s/shard-"))

    def test_frame_loader_in_block_order_is_exact(self):
        before = len(self.ng.requests())
        loc = Loader(self.a, 3, 100, **S.KW)
        rem = Loader(self.ng.url("q8s"), 3, 100, cache=os.path.join(R.TMP, "qc-frames"), **S.KW)
        self.assertTrue(rem.dataset.streamed)
        self.assertEqual(rem.dataset.dtype, "q8")
        # the metadata alone at open, QHEADERS in it
        self.assertEqual(self.served(before), S.once_bytes(self.a) - S.feature_bytes(self.a))
        n = 0
        for (xa, ya), (xb, yb) in zip(loc, rem):
            self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb), n)
            n += 1
        self.assertEqual(n, len(loc))
        self.assertEqual(rem.dataset.bytes_fetched, S.feature_bytes(self.a))
        self.assertEqual(self.served(before), S.once_bytes(self.a))

    def test_utterance_loader_in_block_mode_is_exact(self):
        kw = dict(frame_budget=5000, memory="3M", seed=5, threads=2)
        rem = UtteranceLoader(self.ng.url("q8s"), cache=os.path.join(R.TMP, "qc-utts"), **kw)
        self.assertTrue(rem.dataset.streamed)
        n = 0
        for a, b in zip(UtteranceLoader(self.a, **kw), rem):
            self.assertEqual(len(a), len(b))
            for ta, tb in zip(a, b):
                self.assertTrue(torch.equal(ta, tb), n)
            n += 1
        self.assertEqual(n, len(UtteranceLoader(self.a, **kw)))
        self.assertEqual(rem.dataset.bytes_fetched, S.feature_bytes(self.a))

    def test_a_bad_header_is_refused_at_first_use(self):
        for make in (lambda c: Loader(self.ng.url("dmg"), 3, 100, cache=c, **S.KW),
                     lambda c: UtteranceLoader(self.ng.url("dmg"), cache=c, frame_budget=5000,
                                               memory="3M", seed=5, threads=2)):
            rem = make(os.path.join(R.TMP, f"qc-dmg-{id(make)}"))
            self.assertTrue(rem.dataset.streamed)  # open took it: its checksums agree
            with self.assertRaises(ctxshard.CtxshardError) as cm:
                for _ in rem:
                    pass
            msg = str(cm.exception)
            self.assertIn(self.shard, msg)
            self.assertIn(f"QHEADERS entry of utterance {self.victim}", msg)
            self.assertIn("range -1", msg)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
