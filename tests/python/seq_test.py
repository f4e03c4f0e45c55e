"""Label sequences (format 1.2) end to end: `ctxshard synth --transcripts
sequence` writes the runs of its phoneme segments; `ctxshard pack
--transcripts sequence|both`, ctxshard.pack, ctxshard.Writer, split packing
and merge, compressed shards and convert all store the same sequences (and
the same bytes); Dataset.label_seq reads them back; bad sequence transcripts
are refused naming the file and the reason, leaving nothing behind; a
per-frame transcript of the wrong length says which option reads sequences;
a flipped byte is caught.

usage: /usr/bin/python3 tests/python/seq_test.py BUILD_DIR SOURCE_ROOT
       PYTHON tests/python/seq_test.py --installed SOURCE_ROOT
The second form tests the package pip installed into PYTHON's environment
(scripts/test-installed.sh), the command from its bin."""
import filecmp
import glob
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

if sys.argv[1] == "--installed":
    EXE = os.path.join(os.path.dirname(sys.executable), "ctxshard")
else:
    BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    EXE = os.path.join(BUILD, "tools", "ctxshard")
    os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
    sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402
from testenv import same_dataset  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-seq-")
SOS, EOS = 40, 41  # in the standard phoneme list


def run(*args, check=True):
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True)
    if check and p.returncode:
        raise AssertionError(f"ctxshard {' '.join(map(str, args))}: {p.stderr}")
    return p


def at(*names):
    return os.path.join(TMP, *names)


def runs(labels):
    labels = np.asarray(labels)
    return labels[np.r_[True, labels[1:] != labels[:-1]]]


def transcripts(raw):
    """{id: transcript array} of a raw directory."""
    return {os.path.basename(f)[:-4]: np.load(f)
            for f in sorted(glob.glob(os.path.join(raw, "transcript", "*.npy")))}


def setUpModule():
    # The same utterances twice: per-frame transcripts and their sequences.
    run("synth", at("frames"), "--utts", 12, "--seed", 4, "--quiet")
    run("synth", at("seqs"), "--utts", 12, "--seed", 4, "--transcripts", "sequence", "--quiet")
    run("pack", at("frames"), at("ds-frames"), "--quiet")
    run("pack", at("seqs"), at("ds-seq"), "--transcripts", "sequence", "--quiet")
    run("pack", at("frames"), at("ds-both"), "--transcripts", "both", "--quiet")


def tearDownModule():
    shutil.rmtree(TMP)


class Synth(unittest.TestCase):
    def test_sequences_are_the_runs_of_the_frame_transcripts(self):
        fr, sq = transcripts(at("frames")), transcripts(at("seqs"))
        self.assertEqual(sorted(fr), sorted(sq))
        for uid, t in fr.items():
            self.assertEqual(sq[uid][0], "[SOS]")
            self.assertEqual(sq[uid][-1], "[EOS]")
            self.assertEqual(list(sq[uid][1:-1]), list(runs(t[1:-1])))
            self.assertLess(len(sq[uid]), len(t))  # shorter than the frames: no alignment
        # and the features are the same
        for f in glob.glob(at("frames", "mfcc", "*.npy")):
            self.assertTrue(filecmp.cmp(f, f.replace("frames", "seqs"), shallow=False))


class ReadBack(unittest.TestCase):
    def test_sequence_only(self):
        ds, fr = ctxshard.Dataset(at("ds-seq")), ctxshard.Dataset(at("ds-frames"))
        self.assertTrue(ds.has_label_seqs)
        self.assertFalse(fr.has_label_seqs)
        self.assertEqual(ds.info["format_minor"], 3)  # 1.3: block sums
        self.assertEqual(ds.info["label_width"], 0)  # no per-frame labels
        self.assertEqual(ds.num_classes, 42)
        vocab = ds.vocab
        longest = 0
        for u, uid in enumerate(ds.ids):
            want = [vocab.index(s) for s in transcripts(at("seqs"))[uid][1:-1]]
            got = ds.label_seq(u)
            self.assertEqual(got.dtype, np.int64)
            self.assertEqual(list(got), want)
            longest = max(longest, len(want))
            # the features are those of the per-frame dataset
            self.assertTrue(np.array_equal(ds.utterance(u)[1], fr.utterance(u)[1]))
            self.assertIsNone(ds.utterance(u)[2])
        self.assertEqual(ds.max_seq_length, longest)
        with self.assertRaisesRegex(ValueError, "label sequences only"):
            ds.labels
        with self.assertRaisesRegex(ValueError, "no labels"):
            ds.gather([0, 1], 2, labels=True)
        with self.assertRaisesRegex(ValueError, "label sequences only"):
            ds.labels_of([0, 1])
        with self.assertRaises(IndexError):
            ds.label_seq(len(ds.ids))
        with self.assertRaisesRegex(ValueError, "no.*sequences|none"):
            fr.label_seq(0)
        self.assertEqual(subprocess.run([EXE, "verify", at("ds-seq"), "--quiet"]).returncode, 0)

    def test_both(self):
        ds, fr = ctxshard.Dataset(at("ds-both")), ctxshard.Dataset(at("ds-frames"))
        self.assertTrue(ds.has_label_seqs)
        self.assertTrue(np.array_equal(ds.labels, fr.labels))
        sq = ctxshard.Dataset(at("ds-seq"))
        for u in range(len(ds.ids)):
            lab = ds.utterance(u)[2]
            self.assertEqual(list(ds.label_seq(u)), list(runs(lab)))
            self.assertEqual(list(ds.label_seq(u)), list(sq.label_seq(u)))
        # shards and the manifest differ from the per-frame pack only by the
        # sequences (and the minor version)
        self.assertEqual(ds.stats.label_counts.tolist(), fr.stats.label_counts.tolist())
        self.assertEqual(ctxshard.Dataset(at("ds-seq")).stats.label_counts.sum(), 0)

    def test_info(self):
        out = run("info", at("ds-seq")).stdout
        self.assertIn("no per-frame labels (label sequences only)", out)
        self.assertIn("sequences     one per utterance", out)
        out = run("info", at("ds-frames")).stdout
        self.assertNotIn("sequences", out)
        import json
        j = json.loads(run("info", at("ds-both"), "--json").stdout)
        ds = ctxshard.Dataset(at("ds-both"))
        self.assertEqual(j["label_sequences"]["max"], ds.max_seq_length)
        self.assertNotIn("label_sequences", json.loads(run("info", at("ds-frames"), "--json").stdout))

    def test_required_section_for_older_readers(self):
        """SEQ_META carries the required bit: a reader of 1.1 refuses the
        dataset (CXS_E_UNSUPPORTED) rather than misread it."""
        data = open(at("ds-seq", "manifest.cxs"), "rb").read()
        n = struct.unpack_from("<I", data, 24)[0]
        types = {struct.unpack_from("<I", data, 64 + 32 * i)[0]:
                 struct.unpack_from("<I", data, 64 + 32 * i + 4)[0] for i in range(n)}
        self.assertEqual(types.get(21), 1)
        self.assertEqual(struct.unpack_from("<H", data, 10)[0], 3)  # block sums: 1.3
        # without block sums: 1.2 with sequences, byte for byte the 1.0
        # dataset without
        for src, out, extra, minor in (("seqs", "off-seq", ("--transcripts", "sequence"), 2),
                                       ("frames", "off-frames", (), 0)):
            run("pack", at(src), at(out), "--block-sums", "off", "--quiet", *extra)
            data = open(at(out, "manifest.cxs"), "rb").read()
            self.assertEqual(struct.unpack_from("<H", data, 10)[0], minor)


class Writers(unittest.TestCase):
    def test_python_pack_and_writer_match_the_command(self):
        ctxshard.pack(at("seqs"), at("py-seq"), transcripts="sequence", threads=2)
        self.assertIsNone(same_dataset(at("ds-seq"), at("py-seq")))
        ctxshard.pack(at("frames"), at("py-both"), transcripts="both", threads=2)
        self.assertIsNone(same_dataset(at("ds-both"), at("py-both")))
        # the Writer, with symbols framed, indices bare, and symbols bare
        with ctxshard.Writer(at("w-seq"), vocab="phonemes", transcripts="sequence") as w:
            for n, (uid, t) in enumerate(sorted(transcripts(at("seqs")).items())):
                x = np.load(at("seqs", "mfcc", uid + ".npy"))
                if n % 3 == 0:
                    w.add(uid, x, seq=t)
                elif n % 3 == 1:
                    w.add(uid, x, seq=[ctxshard.PHONEMES.index(s) for s in t[1:-1]])
                else:
                    w.add(uid, x, seq=list(t[1:-1]))
        self.assertIsNone(same_dataset(at("ds-seq"), at("w-seq")))

    def test_writer_rejections(self):
        w = ctxshard.Writer(at("w-bad"), vocab="phonemes", transcripts="sequence")
        x = np.zeros((5, 3), np.float32)
        for seq, reason in [
                ([], "empty label sequence"),
                (["[SOS]", "[EOS]"], "empty label sequence"),
                (["[SOS]", "AA", "B"], "starts with [SOS] but does not end with [EOS]"),
                (["AA", "[EOS]"], "ends with [EOS] but does not start with [SOS]"),
                (["AA", "QQ"], "sequence position 1: unknown symbol 'QQ'"),
                (["AA", "[SOS]", "B"], "sequence position 1: [SOS] inside the sequence"),
                ([1, 99], "sequence position 1: label 99 is outside the vocabulary")]:
            with self.assertRaises(ctxshard.RejectedUtterance) as e:
                w.add("u", x, seq=seq)
            self.assertIn(reason, str(e.exception))
            self.assertEqual(e.exception.id, "u")
        self.assertTrue(w.add("u", x, seq=["AA", "AA", "B"]))  # repeats are kept
        with self.assertRaisesRegex(ValueError, "label sequences only"):
            w.add("v", x, labels=["AA"] * 5, seq=["AA"])
        w.commit()
        self.assertEqual(list(ctxshard.Dataset(at("w-bad")).label_seq(0)), [1, 1, 7])
        with self.assertRaisesRegex(ValueError, "transcripts='sequence'"):
            with ctxshard.Writer(at("w-no"), vocab="phonemes") as w2:
                w2.add("u", x, labels=["AA"] * 5, seq=["AA"])
        with self.assertRaisesRegex(ValueError, "need a vocabulary"):
            ctxshard.Writer(at("w-no"), transcripts="sequence")
        self.assertFalse(os.path.exists(at("w-no")))


class Refusals(unittest.TestCase):
    """Every bad sequence transcript: exit 1, the file and the reason,
    nothing written; `check` finds the same."""

    def setUp(self):
        self.raw = at("bad-raw")
        shutil.rmtree(self.raw, ignore_errors=True)
        run("synth", self.raw, "--utts", 3, "--seed", 8, "--transcripts", "sequence", "--quiet")
        self.ids = sorted(transcripts(self.raw))

    def refused(self, t, reason, mode="sequence", which=1):
        path = os.path.join(self.raw, "transcript", self.ids[which] + ".npy")
        np.save(path, t)
        out = at("bad-out")
        p = run("pack", self.raw, out, "--transcripts", mode, "--quiet", check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn(f"{path}: {reason}", p.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual([n for n in os.listdir(TMP) if ".tmp-" in n], [])
        p = run("check", self.raw, "--transcripts", mode, check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn(reason, p.stderr)

    def test_unknown_symbol(self):
        self.refused(np.array(["[SOS]", "AA", "QQ", "[EOS]"]), "position 2: unknown symbol 'QQ'")

    def test_empty(self):
        self.refused(np.array(["[SOS]", "[EOS]"]), "empty label sequence")
        self.refused(np.array([], dtype="<U5"), "empty label sequence")

    def test_one_marker(self):
        self.refused(np.array(["[SOS]", "AA", "B"]),
                     "starts with [SOS] but does not end with [EOS]")
        self.refused(np.array(["AA", "B", "[EOS]"]),
                     "ends with [EOS] but does not start with [SOS]")
        self.refused(np.array([SOS, 1, 2]), "starts with [SOS] but does not end with [EOS]")

    def test_marker_inside(self):
        self.refused(np.array(["[SOS]", "AA", "[EOS]", "B", "[EOS]"]),
                     "position 2: [EOS] inside the sequence")

    def test_per_frame_layout_names_the_option(self):
        for mode in ("frames", "both"):
            self.refused(np.array(["[SOS]", "AA", "B", "[EOS]"]),
                         "4 symbols, expected", mode=mode, which=0)
            p = run("pack", self.raw, at("bad-out"), "--transcripts", mode, check=False)
            self.assertIn("phoneme sequences not aligned with the frames (HW3P2), pack with "
                          "--transcripts sequence", p.stderr)

    def test_integers_and_bare(self):
        path = os.path.join(self.raw, "transcript", self.ids[1] + ".npy")
        np.save(path, np.array([7, 1, 7], dtype=">u2"))
        run("pack", self.raw, at("ok-out"), "--transcripts", "sequence", "--quiet")
        self.assertEqual(list(ctxshard.Dataset(at("ok-out")).label_seq(1)), [7, 1, 7])
        shutil.rmtree(at("ok-out"))


class SplitMergeCompress(unittest.TestCase):
    def test_parts_merge_to_the_whole(self):
        for mode, raw, whole in [("sequence", "seqs", "ds-seq"), ("both", "frames", "ds-both")]:
            parts = []
            for i in range(1, 4):
                p = at(f"part-{mode}-{i}")
                run("pack", at(raw), p, "--transcripts", mode, "--part", f"{i}/3",
                    "--shard-size", "256K", "--quiet")
                parts.append(p)
            run("merge", *parts, at(f"merged-{mode}"), "--quiet")
            run("pack", at(raw), at(f"whole-{mode}"), "--transcripts", mode, "--shard-size",
                "256K", "--quiet")
            self.assertIsNone(same_dataset(at(f"merged-{mode}"), at(f"whole-{mode}")))
            ds = ctxshard.Dataset(at(f"merged-{mode}"))
            self.assertGreater(ds.info["num_shards"], 2)
            ref = ctxshard.Dataset(at(whole))
            for u in range(len(ds.ids)):
                self.assertEqual(list(ds.label_seq(u)), list(ref.label_seq(u)))
        # parts packed with different --transcripts are not merged
        run("pack", at("frames"), at("px-1"), "--transcripts", "both", "--part", "1/2",
            "--shard-size", "256K", "--quiet")
        run("pack", at("frames"), at("px-2"), "--part", "2/2", "--shard-size", "256K", "--quiet")
        p = run("merge", at("px-1"), at("px-2"), at("px-out"), check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--transcripts", p.stderr)
        self.assertFalse(os.path.exists(at("px-out")))

    def test_compressed(self):
        run("pack", at("seqs"), at("z-seq"), "--transcripts", "sequence", "--compress", "zstd",
            "--quiet")
        z, ref = ctxshard.Dataset(at("z-seq")), ctxshard.Dataset(at("ds-seq"))
        self.assertEqual(z.info["compression"], 1)
        for u in range(len(z.ids)):
            self.assertEqual(list(z.label_seq(u)), list(ref.label_seq(u)))
        self.assertEqual(subprocess.run([EXE, "verify", at("z-seq"), "--quiet"]).returncode, 0)
        # convert carries them both ways, byte for byte
        run("convert", at("ds-both"), at("z-both"), "--compress", "zstd", "--quiet")
        run("convert", at("z-both"), at("back-both"), "--no-compress", "--quiet")
        self.assertIsNone(same_dataset(at("ds-both"), at("back-both")))
        run("convert", at("z-seq"), at("back-seq"), "--no-compress", "--quiet")
        self.assertIsNone(same_dataset(at("ds-seq"), at("back-seq")))


class Corruption(unittest.TestCase):
    def test_flipped_sequence_byte(self):
        d = at("flip")
        shutil.copytree(at("ds-seq"), d)
        shard = os.path.join(d, "shard-000000.cxs")
        data = bytearray(open(shard, "rb").read())
        n = struct.unpack_from("<I", data, 24)[0]
        for i in range(n):
            t, _, off, ln, _ = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
            if t == 8:
                data[off + ln - 1] ^= 0x01  # the last symbol
        open(shard, "wb").write(bytes(data))
        p = run("verify", d, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("SEQUENCES", p.stderr)
        self.assertIn("checksum", p.stderr)
        # format 1.3 (BLOCKSUMS, the writer's default): open leaves
        # SEQUENCES to the first use of each block (spec section 8); the
        # damaged sequence is refused there, never served
        ds = ctxshard.Dataset(d)
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ds.label_seq(ds.num_utterances - 1)
        self.assertIn("checksum", str(cm.exception))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
