"""A q8 dataset streamed from a URL (CXS_OPEN_STREAM, nginx on 127.0.0.1):
open fetches the metadata alone, QHEADERS with it; the frame Loader in
block order and the utterance loader in block mode serve exactly what the
local copy serves, each feature byte fetched once; a header the writer
cannot have written (its checksums made to agree, so that open takes it)
stops the epoch at its first use, naming the shard and the utterance.

usage: /usr/bin/python3 tests/python/qstream_test.py BUILD_DIR SOURCE_ROOT"""
import ctypes
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
QHEADERS, BLOCKSUMS, SHARD_TABLE = 10, 9, 17
_XXH = ctypes.CDLL("libxxhash.so.0")
_XXH.XXH3_64bits.restype = ctypes.c_uint64
_XXH.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh(b):
    return _XXH.XXH3_64bits(bytes(b), len(b))


def section_table(data):
    """{type: (offset, length, where its table entry is)}"""
    n = struct.unpack_from("<I", data, 24)[0]
    out = {}
    for i in range(n):
        t, _, off, length, _ = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
        out[t] = (off, length, 64 + 32 * i)
    return out


def rehead(data):
    """data's header checksum made to agree with its section table."""
    n = struct.unpack_from("<I", data, 24)[0]
    struct.pack_into("<Q", data, 56, 0)
    struct.pack_into("<Q", data, 56, xxh(data[:64 + 32 * n]))


def bad_header(ds_dir, shard, number, lu, dim):
    """Local utterance lu's q8 header of shard (the dataset's shard number)
    given range -1 (what no writer writes), and every checksum over it made
    to agree: QHEADERS's block sums, its section checksum, BLOCKSUMS's, the
    shard header's, and the manifest's record of it."""
    path = os.path.join(ds_dir, shard)
    data = bytearray(open(path, "rb").read())
    s = section_table(data)
    qo, ql, qe = s[QHEADERS]
    struct.pack_into("<f", data, qo + lu * (8 + 8 * dim) + 4, -1.0)
    bo, bl, be = s[BLOCKSUMS]
    count = struct.unpack_from("<I", data, bo)[0]
    for i in range(count):
        t, shift, nb, first = struct.unpack_from("<IIQQ", data, bo + 8 + 24 * i)
        if t == QHEADERS:
            for j in range(nb):
                blk = data[qo + (j << shift):qo + min(ql, (j + 1) << shift)]
                struct.pack_into("<Q", data, bo + 8 + 24 * count + 8 * (first + j), xxh(blk))
    struct.pack_into("<Q", data, qe + 24, xxh(data[qo:qo + ql]))
    struct.pack_into("<Q", data, be + 24, xxh(data[bo:bo + bl]))
    rehead(data)
    open(path, "wb").write(data)
    man = os.path.join(ds_dir, "manifest.cxs")
    m = bytearray(open(man, "rb").read())
    to, tl, te = section_table(m)[SHARD_TABLE]
    struct.pack_into("<Q", m, to + 64 * number + 8, struct.unpack_from("<Q", data, 56)[0])
    struct.pack_into("<Q", m, te + 24, xxh(m[to:to + tl]))
    rehead(m)
    open(man, "wb").write(m)


class StreamedQ8(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.www = os.path.join(R.TMP, "qwww")
        os.makedirs(cls.www)
        os.chmod(cls.www, 0o755)
        cls.a = S.make("q8s", "--dtype", "q8", "--shard-size", "256K")
        shutil.copytree(cls.a, os.path.join(cls.www, "q8s"))
        with ctxshard.open(cls.a) as ds:
            cls.dim = ds.dim
            cls.victim = ds.utterance(ds.num_utterances // 2)[0]
        cls.dmg = os.path.join(cls.www, "dmg")
        shutil.copytree(cls.a, cls.dmg)
        with ctxshard.open(cls.a) as ds:
            u = ds.num_utterances // 2
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
