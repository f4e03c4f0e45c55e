"""`ctxshard import kaldi` and ctxshard.import_kaldi: archives written by
an independent encoder (tests/python/kaldi_ref.py, from Kaldi's
algorithm) for every object type and odd sizes, imported through an scp
(sorted, unsorted, with gaps between records) and as a bare archive; the
stored values equal the reference decoding of the same bytes exactly, and
the dataset is byte-identical to the same matrices written through
ctxshard.Writer; CM's three ranges against hand-computed values; labels
from text files and alignments with vocabularies built or given; every
refusal names the file, the place and the reason.

usage: /usr/bin/python3 tests/python/kaldi_test.py BUILD_DIR SOURCE_ROOT"""
import os
import shutil
import struct
import sys
import tempfile
import unittest

from testenv import from_build, run, same_dataset

BUILD, SRC, EXE = from_build()

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402
import kaldi_ref as K  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-kaldi-")
F = np.float32


def rd(path):
    with open(path, "rb") as f:
        return f.read()


def wr(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


def tmpdir():
    return tempfile.mkdtemp(dir=TMP)


def features(rng, R, C, scale=3.0):
    return (rng.standard_normal((R, C)) * scale + rng.uniform(-2, 2, C)).astype(F)


def stored(ds):
    """{id: features} of a dataset (float32 copies)."""
    return {uid: np.array(x, dtype=F) for uid, x, _ in (ds.utterance(u) for u in range(len(ds.ids)))}


SIZES = (1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 200)  # 1 row, the <5 case, the 8-row boundary


class Decode(unittest.TestCase):
    """Every kind, odd sizes: imported values == the reference decoding."""

    @classmethod
    def setUpClass(cls):
        rng = np.random.default_rng(29)
        cls.objs = {}
        for C in (1, 13):
            items = []
            for kind in ("FM", "DM", "CM", "CM2", "CM3"):
                for R in SIZES:
                    m = features(rng, R, C)
                    if kind == "DM":
                        m = m.astype(np.float64) + rng.standard_normal((R, C)) * 1e-9
                    items.append((f"{kind}-{C}-{R:04d}", K.encode(m, kind)))
            # a constant matrix: ComputeGlobalHeader's range for max == min
            items.append((f"CM-{C}-const", K.encode(np.full((12, C), -3.5, F), "CM")))
            cls.objs[C] = items

    def check(self, out, items):
        with ctxshard.open(out) as ds:
            got = stored(ds)
            self.assertEqual(sorted(got), sorted(k for k, _ in items))
            for k, obj in items:
                _, want = K.decode(obj)
                want = want.astype(F)  # a double matrix, rounded as the writer does
                self.assertTrue(np.array_equal(got[k], want), f"{k}: differs from the "
                                f"reference by {np.abs(got[k] - want).max()}")

    def test_scp_every_kind_exact(self):
        for C, items in self.objs.items():
            d = tmpdir()
            ark = os.path.join(d, "feats.ark")
            offs = K.write_ark(ark, items)
            scp = os.path.join(d, "feats.scp")
            K.write_scp(scp, [(k, ark, offs[k]) for k, _ in items])
            r = run("import", "kaldi", scp, os.path.join(d, "out"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("FM DM CM CM2 CM3", r.stdout)
            self.check(os.path.join(d, "out"), items)
            r = run("verify", os.path.join(d, "out"))
            self.assertEqual(r.returncode, 0, r.stderr + r.stdout)

    def test_bare_ark_same_bytes_as_scp(self):
        items = self.objs[13]
        d = tmpdir()
        ark = os.path.join(d, "a.ark")
        offs = K.write_ark(ark, items)
        K.write_scp(os.path.join(d, "feats.scp"), [(k, ark, offs[k]) for k, _ in items])
        self.assertEqual(run("import", "kaldi", ark, os.path.join(d, "o1")).returncode, 0)
        self.assertEqual(run("import", "kaldi", os.path.join(d, "feats.scp"),
                             os.path.join(d, "o2")).returncode, 0)
        self.assertIsNone(same_dataset(os.path.join(d, "o1"), os.path.join(d, "o2")))
        # an "ark:" prefix on a name without the ending
        os.rename(ark, os.path.join(d, "archive"))
        r = run("import", "kaldi", "ark:" + os.path.join(d, "archive"), os.path.join(d, "o3"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(same_dataset(os.path.join(d, "o1"), os.path.join(d, "o3")))

    def test_byte_identical_to_writer(self):
        """Importing == writing the reference-decoded matrices through
        ctxshard.Writer with the same options (float16, zstd, guard 8)."""
        items = self.objs[13]
        d = tmpdir()
        ark = os.path.join(d, "a.ark")
        K.write_ark(ark, items)
        opts = dict(dtype="float16", compress="zstd", guard=8, shard_size="64K")
        info = ctxshard.import_kaldi(ark, os.path.join(d, "imp"), **opts)
        self.assertEqual(info["num_utterances"], len(items))
        self.assertEqual(info["kinds"], ["FM", "DM", "CM", "CM2", "CM3"])
        self.assertGreater(info["num_shards"], 1)
        with ctxshard.Writer(os.path.join(d, "wr"), **opts) as w:
            for k, obj in sorted(items):
                w.add(k, K.decode(obj)[1])
        self.assertIsNone(same_dataset(os.path.join(d, "imp"), os.path.join(d, "wr")))
        r = run("import", "kaldi", ark, os.path.join(d, "cli"), "--dtype", "f16", "--compress",
                "zstd", "--guard", "8", "--shard-size", "64K", "--threads", "3")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(same_dataset(os.path.join(d, "imp"), os.path.join(d, "cli")))

    def test_parts_merge_to_the_whole(self):
        """--part I/N: slices of whole shards planned from the headers;
        merged, the bytes of the whole import (and with frame labels)."""
        items = self.objs[13]
        d = tmpdir()
        ark = os.path.join(d, "a.ark")
        K.write_ark(ark, items)
        ali = os.path.join(d, "ali.txt")
        wr(ali, "".join(f"{k} " + " ".join(str((i + t) % 5) for t in range(len(K.decode(o)[1])))
                        + "\n" for i, (k, o) in enumerate(items)))
        for extra in ([], ["--ali", ali, "--vocab-from-data"]):
            whole = os.path.join(d, "whole")
            r = run("import", "kaldi", ark, whole, "--shard-size", "20K", *extra)
            self.assertEqual(r.returncode, 0, r.stderr)
            parts = []
            for i in (1, 2, 3):
                p = os.path.join(d, f"p{i}")
                r = run("import", "kaldi", ark, p, "--shard-size", "20K", "--part", f"{i}/3",
                        *extra)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIn(f"imported part {i} of 3", r.stdout)
                parts.append(p)
            merged = os.path.join(d, "merged")
            r = run("merge", *reversed(parts), merged)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIsNone(same_dataset(whole, merged))
            # the Python binding writes the same part
            ctxshard.import_kaldi(ark, os.path.join(d, "py2"), shard_size="20K", part="2/3",
                                  ali=extra[1] if extra else None,
                                  vocab_from_data=bool(extra))
            self.assertIsNone(same_dataset(parts[1], os.path.join(d, "py2")))
            for p in parts + [whole, merged, os.path.join(d, "py2")]:
                shutil.rmtree(p)
        r = run("import", "kaldi", ark, os.path.join(d, "x"), "--part", "1/3")
        self.assertEqual(r.returncode, 1)
        self.assertIn("give a smaller --shard-size", r.stderr)

    def test_vectors(self):
        rng = np.random.default_rng(3)
        items = [("a", K.encode(rng.standard_normal(7).astype(F), "FV")),
                 ("b", K.encode(rng.standard_normal(1), "DV"))]
        d = tmpdir()
        ark = os.path.join(d, "v.ark")
        K.write_ark(ark, items)
        r = run("import", "kaldi", ark, os.path.join(d, "out"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check(os.path.join(d, "out"), items)

    def test_cm_hand_values(self):
        """min 0, range 65535: the percentiles decode to their own integer
        values (65535 * 1.52590218966964e-05F is 1.0 in float).  Column 0
        (0, 64, 192, 255): every byte decodes to itself.  Column 1
        (0, 128, 256, 508): byte b <= 64 gives 2b, 64 < b <= 192 gives
        128 + (b - 64), b > 192 gives 256 + 4 (b - 192)."""
        b = list(range(256))
        obj = K.cm_object(0.0, 65535.0, [(0, 64, 192, 255), (0, 128, 256, 508)], [b, b])
        want = np.zeros((256, 2), F)
        for v in b:
            want[v, 0] = v
            want[v, 1] = 2 * v if v <= 64 else 128 + (v - 64) if v <= 192 else 256 + 4 * (v - 192)
        self.assertTrue(np.array_equal(K.decode(obj)[1], want))
        d = tmpdir()
        K.write_ark(os.path.join(d, "h.ark"), [("hand", obj)])
        self.assertEqual(run("import", "kaldi", os.path.join(d, "h.ark"),
                             os.path.join(d, "out")).returncode, 0)
        with ctxshard.open(os.path.join(d, "out")) as ds:
            self.assertTrue(np.array_equal(np.asarray(ds.utterance(0)[1]), want))

    def test_reference_tells_the_order_of_operations(self):
        """A decoder that does CharToFloat all in float (1/63 as a float)
        differs from Kaldi's on many values: the exact comparisons above
        would catch such a decoder."""
        rng = np.random.default_rng(5)
        obj = K.encode(features(rng, 500, 20, 5.0), "CM")
        _, ref = K.decode(obj)
        mn, rg, R, C = struct.unpack_from("<ffii", obj, 5)
        heads = np.frombuffer(obj, "<u2", 4 * C, 21).reshape(C, 4)
        data = np.frombuffer(obj, np.uint8, R * C, 21 + 8 * C).reshape(C, R).astype(np.int64)
        diff = 0
        for c in range(C):
            p0, p25, p75, p100 = [K.u16_to_float(F(mn), F(rg), int(x)) for x in heads[c]]
            b = data[c]
            naive = np.where(b <= 64, p0 + (p25 - p0) * F(b) * F(1 / 64),
                             np.where(b <= 192, p25 + (p75 - p25) * F(b - 64) * F(1 / 128),
                                      p75 + (p100 - p75) * F(b - 192) * F(1 / 63))).astype(F)
            diff += int(np.sum(naive != ref[:, c]))
        self.assertGreater(diff, 0)


class Listing(unittest.TestCase):
    """scp forms: unsorted, gaps, several archives, relative paths."""

    def setUp(self):
        rng = np.random.default_rng(7)
        self.d = tmpdir()
        self.items = [(f"spk{i % 3}-utt{i:02d}", K.encode(features(rng, 20 + i, 5), "CM"))
                      for i in range(12)]

    def test_unsorted_sorted_or_refused(self):
        d = self.d
        a1, a2 = os.path.join(d, "one.ark"), os.path.join(d, "two.ark")
        o1 = K.write_ark(a1, self.items[:6])
        o2 = K.write_ark(a2, self.items[6:])
        lines = [(k, a1, o1[k]) for k, _ in self.items[:6]] + [(k, a2, o2[k]) for k, _ in self.items[6:]]
        lines = lines[::-1]
        scp = os.path.join(d, "feats.scp")
        K.write_scp(scp, lines)
        r = run("import", "kaldi", scp, os.path.join(d, "out"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("not in byte order: sorted", r.stderr)
        with ctxshard.open(os.path.join(d, "out")) as ds:
            self.assertEqual(list(ds.ids), sorted(k for k, _ in self.items))
        r = run("import", "kaldi", scp, os.path.join(d, "out2"), "--no-sort")
        self.assertEqual(r.returncode, 1)
        self.assertIn("feats.scp: not sorted: line 2", r.stderr)
        self.assertIn("LC_ALL=C sort -k1,1", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(d, "out2")))
        with self.assertRaises(ctxshard.CtxshardError) as e:
            ctxshard.import_kaldi(scp, os.path.join(d, "out3"), sort=False)
        self.assertIn("not sorted", str(e.exception))

    def test_gaps_and_relative_paths(self):
        """Bytes between records (an scp points past them) and paths
        relative to the current directory, as Kaldi reads them."""
        d = self.d
        ark = os.path.join(d, "gappy.ark")
        lines = []
        with open(ark, "wb") as f:
            for k, obj in self.items:
                f.write(b"junk between records\n")
                lines.append((k, "gappy.ark", f.tell()))
                f.write(obj)
        K.write_scp(os.path.join(d, "feats.scp"), lines)
        r = run("import", "kaldi", "feats.scp", "out", cwd=d)
        self.assertEqual(r.returncode, 0, r.stderr)
        with ctxshard.open(os.path.join(d, "out")) as ds:
            got = stored(ds)
        for k, obj in self.items:
            self.assertTrue(np.array_equal(got[k], K.decode(obj)[1]))
        r = run("import", "kaldi", os.path.join(d, "feats.scp"), os.path.join(d, "o2"),
                cwd=SRC)
        self.assertEqual(r.returncode, 1)
        self.assertIn("gappy.ark: No such file", r.stderr)
        self.assertIn("current directory", r.stderr)


class Labels(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(11)
        self.d = tmpdir()
        self.T = {f"u{i}": 6 + i for i in range(6)}
        self.items = [(k, K.encode(features(rng, T, 4), "CM")) for k, T in self.T.items()]
        self.ark = os.path.join(self.d, "a.ark")
        K.write_ark(self.ark, self.items)
        self.rng = rng

    def write(self, name, lines):
        p = os.path.join(self.d, name)
        with open(p, "w") as f:
            f.write("".join(line + "\n" for line in lines))
        return p

    def test_ali_integers_built_vocab(self):
        ali = {k: self.rng.integers(1, 9, T) for k, T in self.T.items()}
        p = self.write("ali.txt", [k + " " + " ".join(map(str, v)) for k, v in reversed(ali.items())])
        out = os.path.join(self.d, "out")
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--vocab-from-data")
        self.assertEqual(r.returncode, 0, r.stderr)
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.vocab[:3], ["0", "1", "2"])
            self.assertEqual(len(ds.vocab), int(max(v.max() for v in ali.values())) + 1)
            for u, k in enumerate(ds.ids):
                self.assertTrue(np.array_equal(np.asarray(ds.utterance(u)[2]), ali[k]))
        # the same through the Writer
        with ctxshard.Writer(os.path.join(self.d, "wr"), vocab=list(ds.vocab)) as w:
            for k, obj in self.items:
                w.add(k, K.decode(obj)[1], labels=ali[k])
        self.assertIsNone(same_dataset(out, os.path.join(self.d, "wr")))

    def test_ali_symbols_with_symbol_table(self):
        phones = ["<eps>", "SIL", "AA", "B", "K"]
        table = self.write("phones.txt", [f"{s} {i}" for i, s in enumerate(phones)])
        ali = {k: self.rng.integers(1, 5, T) for k, T in self.T.items()}
        # symbols for some utterances, ids (as ali-to-phones writes them) for others
        p = self.write("ali.txt", [k + " " + " ".join(phones[x] if j % 2 else str(x) for x in v)
                                   for j, (k, v) in enumerate(ali.items())])
        out = os.path.join(self.d, "out")
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--vocab", table)
        self.assertEqual(r.returncode, 0, r.stderr)
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.vocab, phones)
            for u, k in enumerate(ds.ids):
                self.assertTrue(np.array_equal(np.asarray(ds.utterance(u)[2]), ali[k]))

    def test_text_built_and_given_vocab(self):
        words = ["the", "cat", "sat", "on", "mat", "A"]
        text = {k: [words[(i + j) % 6] for j in range(1 + i % 4)] for i, k in enumerate(self.T)}
        p = self.write("text", [k + " " + " ".join(v) for k, v in text.items()])
        out = os.path.join(self.d, "out")
        info = ctxshard.import_kaldi(self.ark, out, text=p, vocab_from_data=True)
        self.assertEqual(info["vocab_size"], 6)
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.vocab, sorted(words))  # byte order: "A" first
            self.assertFalse(ds.has_frame_labels)
            for u, k in enumerate(ds.ids):
                self.assertEqual([ds.vocab[i] for i in ds.label_seq(u)], text[k])
        vocab = self.write("words.txt", [f"{w} {i}" for i, w in enumerate(["<eps>"] + words)])
        out2 = os.path.join(self.d, "out2")
        r = run("import", "kaldi", self.ark, out2, "--text", p, "--vocab", vocab)
        self.assertEqual(r.returncode, 0, r.stderr)
        with ctxshard.open(out2) as ds:
            self.assertEqual(ds.vocab, ["<eps>"] + words)
            for u, k in enumerate(ds.ids):
                self.assertEqual([ds.vocab[i] for i in ds.label_seq(u)], text[k])

    def test_label_refusals(self):
        ali = {k: [1] * T for k, T in self.T.items()}
        lines = [k + " " + " ".join(map(str, v)) for k, v in ali.items()]
        out = os.path.join(self.d, "out")
        # missing
        p = self.write("missing.txt", lines[:2] + lines[3:])
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--vocab-from-data")
        self.assertEqual(r.returncode, 1)
        self.assertIn("utterance u2 has no line in the alignment file", r.stderr)
        self.assertIn("1 of the 6 utterances", r.stderr)
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--on-error", "skip",
                "--vocab-from-data")
        self.assertEqual(r.returncode, 0, r.stderr)
        with ctxshard.open(out) as ds:
            self.assertEqual(len(ds.ids), 5)
            self.assertEqual([s[0] for s in ds.skipped], ["u2"])
            self.assertIn("no line in the alignment file", ds.skipped[0][1])
        shutil.rmtree(out)
        # extra
        p = self.write("extra.txt", lines + ["ghost 1 1 1"])
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--vocab-from-data")
        self.assertEqual(r.returncode, 1)
        self.assertIn("extra.txt line 7: utterance ghost has no features", r.stderr)
        # wrong length
        p = self.write("short.txt", [lines[0] + " 1"] + lines[1:])
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--vocab-from-data")
        self.assertEqual(r.returncode, 1)
        self.assertIn("short.txt line 1: utterance u0: 7 labels for 6 frames", r.stderr)
        # unknown token
        table = self.write("phones.txt", ["<eps> 0", "SIL 1"])
        p = self.write("unk.txt", lines[:4] + ["u4 " + " ".join(["SIL"] * 9 + ["ZZ"])] + lines[5:])
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--vocab", table)
        self.assertEqual(r.returncode, 1)
        self.assertIn("unk.txt line 5: utterance u4: token 10 'ZZ' is not in the vocabulary",
                      r.stderr)
        # twice
        p = self.write("twice.txt", lines + [lines[1]])
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--vocab-from-data")
        self.assertEqual(r.returncode, 1)
        self.assertIn("utterance u1 twice, lines 2 and 7", r.stderr)
        self.assertFalse(os.path.exists(out))
        # usage
        r = run("import", "kaldi", self.ark, out, "--ali", p, "--text", p)
        self.assertEqual(r.returncode, 2)
        r = run("import", "hdf4", self.ark, out)
        self.assertEqual(r.returncode, 2)


class Refusals(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(13)
        self.d = tmpdir()
        self.items = [(f"u{i}", K.encode(features(rng, 30, 6), kind))
                      for i, kind in enumerate(["CM", "FM", "CM2", "CM3"])]
        self.ark = os.path.join(self.d, "a.ark")
        self.offs = K.write_ark(self.ark, self.items)
        self.out = os.path.join(self.d, "out")

    def fails(self, src, *want, args=()):
        r = run("import", "kaldi", src, self.out, *args)
        self.assertEqual(r.returncode, 1, r.stderr + r.stdout)
        for w in want:
            self.assertIn(w, r.stderr)
        self.assertFalse(os.path.exists(self.out))
        return r.stderr

    def test_truncated_ark(self):
        data = rd(self.ark)
        cut = os.path.join(self.d, "cut.ark")
        with open(cut, "wb") as f:
            f.write(data[:-7])
        self.fails(cut, f"cut.ark: offset {self.offs['u3']}: utterance u3: CM3 30x6 needs",
                   "truncated archive")
        with open(cut, "wb") as f:
            f.write(data[:self.offs["u3"] + 9])  # inside the header
        self.fails(cut, f"offset {self.offs['u3']}: utterance u3: CM3 header cut short")
        # through an scp
        scp = os.path.join(self.d, "cut.scp")
        K.write_scp(scp, [(k, cut, self.offs[k]) for k, _ in self.items])
        self.fails(scp, "cut.scp line 4: u3: ", "header cut short")

    def test_bad_offset(self):
        scp = os.path.join(self.d, "bad.scp")
        K.write_scp(scp, [(k, self.ark, self.offs[k] + (3 if k == "u1" else 0))
                          for k, _ in self.items])
        self.fails(scp, f"bad.scp line 2: u1: {self.ark} offset {self.offs['u1'] + 3}: "
                   "no Kaldi object here", "a wrong offset?")
        K.write_scp(scp, [(k, self.ark, 10 ** 9 if k == "u2" else self.offs[k])
                          for k, _ in self.items])
        self.fails(scp, "bad.scp line 3: u2", "past the end of the file")
        # --on-error skip leaves it out and lists it
        r = run("import", "kaldi", scp, self.out, "--on-error", "skip")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("skipped: ", r.stderr)
        with ctxshard.open(self.out) as ds:
            self.assertEqual(list(ds.ids), ["u0", "u1", "u3"])
        r = run("info", self.out)
        self.assertIn("u2", r.stdout)

    def test_corrupt_records(self):
        data = bytearray(rd(self.ark))
        o = self.offs["u1"]
        data[o + 2:o + 4] = b"XM"
        bad = os.path.join(self.d, "bad.ark")
        wr(bad, bytes(data))
        self.fails(bad, f"offset {o}: utterance u1: unknown object type 'XM'")
        # (text-form objects and ranges are read: kaldi_forms_test.py)
        dup = os.path.join(self.d, "dup.ark")
        K.write_ark(dup, self.items + [self.items[0]])
        self.fails(dup, "utterance u0 twice, offsets")
        scp = os.path.join(self.d, "pipe.scp")
        wr(scp, "u0 gunzip -c x.ark.gz |\n")
        self.fails(scp, "pipe.scp line 1: u0: 'gunzip -c x.ark.gz |' is a pipe")
        wr(scp, f"u0 {self.ark}:{self.offs['u0']}[0:9,]\n")
        self.fails(scp, "not a Kaldi range")
        empty = os.path.join(self.d, "empty.ark")
        wr(empty, b"u0 " + K.encode(np.zeros((0, 0), F), "FM"))
        self.fails(empty, "utterance u0: an empty FM (0x0)")
        wide = os.path.join(self.d, "wide.ark")
        K.write_ark(wide, [("a", K.encode(np.zeros((3, 6), F), "FM")),
                           ("b", K.encode(np.zeros((3, 7), F), "FM"))])
        self.fails(wide, "utterance b")

    def test_python_error(self):
        scp = os.path.join(self.d, "bad.scp")
        K.write_scp(scp, [("u0", self.ark, 1)])
        with self.assertRaises(ctxshard.CtxshardError) as e:
            ctxshard.import_kaldi(scp, self.out)
        self.assertIn("bad.scp line 1: u0", str(e.exception))
        self.assertFalse(os.path.exists(self.out))
        notes = []
        with self.assertRaises(ZeroDivisionError):
            ctxshard.import_kaldi(self.ark, self.out, progress=lambda d, n: 1 / 0)
        self.assertFalse(os.path.exists(self.out))
        K.write_scp(scp, [(k, self.ark, self.offs[k]) for k, _ in reversed(self.items)])
        info = ctxshard.import_kaldi(scp, self.out, notes=notes.append)
        self.assertTrue(info["sorted"])
        self.assertEqual(len(notes), 1)


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
