"""CLI tests of the ctxshard command: every bad input gets its specific
message naming the file and leaves nothing behind; exit codes; atomic
replacement; determinism across thread counts; corruption caught by verify
and refused by open; exact output of `info` on the golden dataset.

usage: /usr/bin/python3 tests/cli/cli_test.py BUILD/tools/ctxshard SOURCE_ROOT"""
import filecmp
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
SRC = os.path.abspath(sys.argv[2])


def run(*args, cwd=None):
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def sections(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<I", data, 24)[0]
    return {struct.unpack_from("<I", data, 64 + 32 * i)[0]:
            struct.unpack_from("<QQ", data, 64 + 32 * i + 8) for i in range(n)}


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.raw = os.path.join(self.tmp, "raw")
        rc, _, err = run("synth", self.raw, "--utts", 5, "--seed", 3, "--quiet")
        self.assertEqual(rc, 0, err)
        self.ids = sorted(n[:-4] for n in os.listdir(os.path.join(self.raw, "mfcc")))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def mfcc(self, uid):
        return os.path.join(self.raw, "mfcc", uid + ".npy")

    def trans(self, uid):
        return os.path.join(self.raw, "transcript", uid + ".npy")

    def leftovers(self):
        return [n for n in os.listdir(self.tmp) if n not in ("raw",)]

    def expect_refusal(self, needle, path_in_msg):
        """pack fails with exit 1, names the file and the reason, leaves
        nothing; check reports the same problem."""
        out = os.path.join(self.tmp, "out")
        rc, _, err = run("pack", self.raw, out, "--quiet")
        self.assertEqual(rc, 1, err)
        self.assertIn(path_in_msg, err)
        self.assertIn(needle, err)
        self.assertEqual(self.leftovers(), [], "pack left files behind")
        rc, outp, err2 = run("check", self.raw)
        self.assertEqual(rc, 1)
        self.assertIn(needle, err2)
        self.assertIn("1 problem", outp)
        return err


class BadInputs(Base):
    def test_length_rule(self):
        t = np.load(self.trans(self.ids[1]))
        np.save(self.trans(self.ids[1]), np.concatenate([t[:-2], t[-1:]]))
        self.expect_refusal("expected %d ([SOS], one per frame" % (len(t)), self.trans(self.ids[1]))

    def test_missing_sos(self):
        t = np.load(self.trans(self.ids[0]))
        t[0] = "AA"
        np.save(self.trans(self.ids[0]), t)
        self.expect_refusal("position 0: 'AA', expected [SOS]", self.trans(self.ids[0]))

    def test_missing_eos(self):
        t = np.load(self.trans(self.ids[0]))
        t[-1] = "[SIL]"
        np.save(self.trans(self.ids[0]), t)
        self.expect_refusal("'[SIL]', expected [EOS]", self.trans(self.ids[0]))

    def test_unknown_symbol(self):
        t = np.load(self.trans(self.ids[2]))
        t[7] = "QQ"
        np.save(self.trans(self.ids[2]), t)
        self.expect_refusal("position 7: unknown symbol 'QQ'", self.trans(self.ids[2]))

    def test_sos_inside(self):
        t = np.load(self.trans(self.ids[2]))
        t[9] = "[SOS]"
        np.save(self.trans(self.ids[2]), t)
        self.expect_refusal("position 9: [SOS] inside the transcript", self.trans(self.ids[2]))

    def test_feature_width(self):
        x = np.load(self.mfcc(self.ids[3]))
        np.save(self.mfcc(self.ids[3]), x[:, :20])
        self.expect_refusal("20 features per frame, expected 28 like most files (widths: 4 files "
                            "of 28, 1 of 20); re-extract it", self.mfcc(self.ids[3]))

    def test_width_by_majority_not_sort_order(self):
        # The odd file first in sort order: the width is still the most common one.
        x = np.load(self.mfcc(self.ids[0]))
        np.save(self.mfcc(self.ids[0]), np.zeros((len(x), 40), np.float32))
        rc, out, err = run("check", self.raw)
        self.assertEqual(rc, 1)
        self.assertIn("5 utterances checked, 4 valid", out)
        self.assertIn("1 problem", out)
        self.assertIn(f"raw/mfcc: widths: 4 files of 28, 1 of 40: {self.mfcc(self.ids[0])}; "
                      "checking against 28, the most common", err)
        self.assertIn(f"{self.mfcc(self.ids[0])}: 40 features per frame, expected 28 like most "
                      "files (widths: 4 files of 28, 1 of 40)", err)
        out_dir = os.path.join(self.tmp, "out")
        rc, out, err = run("pack", self.raw, out_dir, "--on-error", "skip")
        self.assertEqual(rc, 0, err)
        self.assertIn("packed 4 utterances", out)
        self.assertIn("x 28 dims", out)
        self.assertIn("skipped 1 bad utterance", out)

    def test_empty_utterance(self):
        np.save(self.mfcc(self.ids[1]), np.zeros((0, 28), np.float32))
        np.save(self.trans(self.ids[1]), np.array(["[SOS]", "[EOS]"]))
        self.expect_refusal("empty utterance (0 frames)", self.mfcc(self.ids[1]))

    def test_nan(self):
        x = np.load(self.mfcc(self.ids[4]))
        x[17, 3] = np.nan
        np.save(self.mfcc(self.ids[4]), x)
        self.expect_refusal("NaN at frame 17, dimension 3", self.mfcc(self.ids[4]))

    def test_inf(self):
        x = np.load(self.mfcc(self.ids[4]))
        x[2, 0] = -np.inf
        np.save(self.mfcc(self.ids[4]), x)
        self.expect_refusal("infinity at frame 2, dimension 0", self.mfcc(self.ids[4]))

    def test_features_without_transcript(self):
        os.remove(self.trans(self.ids[2]))
        self.expect_refusal("features without a transcript", self.mfcc(self.ids[2]))

    def test_transcript_without_features(self):
        shutil.copy(self.trans(self.ids[2]), self.trans("zzz"))
        self.expect_refusal("transcript without features", self.trans("zzz"))

    def test_duplicate_id(self):
        shutil.copy(self.mfcc(self.ids[2]), os.path.join(self.raw, "mfcc", self.ids[2] + ".NPY"))
        out = os.path.join(self.tmp, "out")
        rc, _, err = run("pack", self.raw, out, "--quiet")
        self.assertEqual(rc, 1)
        self.assertIn("duplicate utterance id '%s'" % self.ids[2], err)
        self.assertEqual(self.leftovers(), [])

    def test_truncated(self):
        p = self.mfcc(self.ids[0])
        data = open(p, "rb").read()
        open(p, "wb").write(data[:-10])
        self.expect_refusal("truncated: the header promises", p)

    def test_malformed_header(self):
        p = self.mfcc(self.ids[0])
        data = bytearray(open(p, "rb").read())
        data[10:11] = b"("
        open(p, "wb").write(bytes(data))
        self.expect_refusal("malformed header", p)

    def test_not_npy(self):
        p = self.mfcc(self.ids[0])
        open(p, "w").write("hello")
        self.expect_refusal("not a .npy file", p)

    def test_object_array(self):
        p = self.trans(self.ids[0])
        t = np.load(p)
        np.save(p, t.astype(object), allow_pickle=True)
        self.expect_refusal("re-save it with numpy.save(path, array.astype(str))", p)

    def test_wrong_rank(self):
        p = self.mfcc(self.ids[0])
        np.save(p, np.zeros(10, np.float32))
        self.expect_refusal("features have 1 dimensions, expected 2", p)

    def test_integer_features(self):
        p = self.mfcc(self.ids[0])
        np.save(p, np.zeros((10, 28), np.int32))
        self.expect_refusal("expected float (f2, f4 or f8)", p)

    def test_vocab_file_errors(self):
        v = os.path.join(self.tmp, "v.txt")
        open(v, "w").write("A\n\nB\n")
        rc, _, err = run("pack", self.raw, os.path.join(self.tmp, "o"), "--vocab", v)
        self.assertEqual(rc, 2)
        self.assertIn(v + ": line 2 is empty", err)
        open(v, "w").write("A\nB\nA\n")
        rc, _, err = run("check", self.raw, "--vocab", v)
        self.assertEqual(rc, 2)
        self.assertIn("line 3: symbol 'A' appears twice", err)
        self.assertEqual(sorted(self.leftovers()), ["v.txt"])

    def test_check_lists_every_problem(self):
        x = np.load(self.mfcc(self.ids[4]))
        x[1, 1] = np.nan
        np.save(self.mfcc(self.ids[4]), x)
        os.remove(self.trans(self.ids[0]))
        rc, out, err = run("check", self.raw)
        self.assertEqual(rc, 1)
        self.assertIn("2 problems", out)
        self.assertEqual(len(err.strip().splitlines()), 2)

    def test_transposed_features_named(self):
        """A [D, T] features file is named, and said to look transposed,
        with its transcript (the length rule fails first) and without."""
        x = np.load(self.mfcc(self.ids[2]))
        np.save(self.mfcc(self.ids[2]), np.ascontiguousarray(x.T))
        for args in ([], ["--no-transcripts"]):
            with self.subTest(args=args):
                if args:
                    shutil.rmtree(os.path.join(self.raw, "transcript"))
                rc, out, err = run("check", self.raw)
                self.assertEqual(rc, 1)
                line = [l for l in err.splitlines() if "transposed" in l]
                self.assertEqual(len(line), 1, err)
                self.assertTrue(line[0].startswith(self.mfcc(self.ids[2]) + ": "), line[0])
                self.assertIn(f"[{x.shape[1]}, {x.shape[0]}]", line[0])
                self.assertIn("1 problem", out)

    def test_check_repeated_hint_once(self):
        """An HW3P2 split (label sequences) checked in the default mode: one
        problem line per utterance, the hint once, and a summary of it."""
        raw = os.path.join(self.tmp, "seq")
        run("synth", raw, "--utts", 7, "--transcripts", "sequence", "--quiet")
        rc, out, err = run("check", raw)
        self.assertEqual(rc, 1)
        lines = err.strip().splitlines()
        self.assertEqual(err.count("--transcripts sequence"), 2, err)  # first line, summary
        self.assertEqual(sum("symbols, expected" in l for l in lines), 7)
        self.assertIn("--transcripts sequence", lines[0])
        self.assertIn("7 of the 7 problems above", lines[-1])
        self.assertIn("--transcripts sequence", lines[-1])
        self.assertEqual(out.strip().splitlines()[-1],
                         f"{raw}: 7 utterances checked, 0 valid (0 frames, dim 28, with "
                         "transcripts), 7 problems")

    def test_missing_shard_is_damaged_data(self):
        """A shard the manifest lists and the directory lacks is a damaged
        dataset (exit 1, the shard named), not a system error."""
        ds = os.path.join(self.tmp, "ds")
        shutil.copytree(os.path.join(SRC, "tests", "golden", "valid", "tiny"), ds)
        os.remove(os.path.join(ds, "shard-000000.cxs"))
        for cmd in (["verify"], ["info"], ["stats"], ["warm"]):
            with self.subTest(cmd=cmd):
                rc, _, err = run(*cmd, ds)
                self.assertEqual(rc, 1, err)
                self.assertIn(os.path.join(ds, "shard-000000.cxs"), err)
        rc, _, err = run("convert", ds, os.path.join(self.tmp, "c"), "--compress", "zstd")
        self.assertEqual(rc, 1, err)

    def test_test_split_losing_utterances_is_loud(self):
        """A features-only split packed with --on-error skip that lost
        utterances says so in pack (even --quiet) and info, naming the
        count and the ids; --fill-nonfinite keeps every frame instead,
        non-finite values stored as 0, each utterance named."""
        shutil.rmtree(os.path.join(self.raw, "transcript"))
        bad = self.ids[1]
        x = np.load(self.mfcc(bad))
        total = sum(np.load(self.mfcc(i)).shape[0] for i in self.ids)
        x[2, 3], x[4, 0] = np.nan, -np.inf
        np.save(self.mfcc(bad), x)
        out = os.path.join(self.tmp, "skip")
        for quiet in ([], ["--quiet"]):
            rc, _, err = run("pack", self.raw, out, "--on-error", "skip", *quiet)
            self.assertEqual(rc, 0, err)
            self.assertIn(f"WARNING: {out} is a features-only split (a test split?) and 1 "
                          f"utterance was left out ({bad}): predictions over it have fewer rows",
                          err)
            self.assertIn("--fill-nonfinite", err)
        rc, info, err = run("info", out)
        self.assertEqual(rc, 0)
        self.assertIn("WARNING       features only, and 1 utterance left out", info)
        self.assertIn("1 utterance left out at pack time: predictions", err)
        rc, js, err = run("info", out, "--json")
        self.assertIn("WARNING", err)
        import json
        self.assertIs(json.loads(js)["incomplete"], True)
        rc, _, err = run("gather", out, "--context", 0, "--all", "--out",
                         os.path.join(self.tmp, "lost.npy"))
        self.assertEqual(rc, 0, err)
        self.assertIn(f"WARNING: {out} is a features-only split (a test split?) with 1 "
                      "utterance left out at pack time: the windows written are fewer", err)
        fill = os.path.join(self.tmp, "fill")
        rc, said, err = run("pack", self.raw, fill, "--fill-nonfinite")
        self.assertEqual(rc, 0, err)
        self.assertIn(f"zero-filled: {self.mfcc(bad)}: 2 NaN or infinite values stored as 0", err)
        self.assertIn(f"zero-filled 2 NaN or infinite values in 1 utterance ({bad}; ", said)
        self.assertNotIn("WARNING", err)
        rc, info, err = run("info", fill)
        self.assertIn("5 (0 skipped at pack time)", info)
        self.assertEqual(err, "")
        xo = os.path.join(self.tmp, "x.npy")
        rc, _, err = run("gather", fill, "--context", 0, "--all", "--out", xo)
        self.assertEqual(rc, 0, err)
        rows = np.load(xo)
        self.assertEqual(len(rows), total)  # a row per frame of the raw split
        self.assertTrue(np.isfinite(rows).all())
        rc, out2, _ = run("check", self.raw)
        self.assertEqual(rc, 1)
        rc, out2, _ = run("check", self.raw, "--fill-nonfinite")
        self.assertEqual(rc, 0, out2)
        self.assertEqual(run("verify", fill)[0], 0)
        # left out because q8 cannot code values near the float limit:
        # --fill-nonfinite would not keep it, a float dtype would
        checker = np.add.outer(np.arange(x.shape[0]), np.arange(x.shape[1])) % 2
        np.save(self.mfcc(bad), np.where(checker, 0.95e38, -1e38).astype(np.float32))
        rc, _, err = run("pack", self.raw, os.path.join(self.tmp, "q8"), "--dtype", "q8",
                         "--on-error", "skip")
        self.assertEqual(rc, 0, err)
        self.assertIn("a code would decode beyond float", err)
        self.assertIn("pack with --fill-nonfinite where the reason given is a NaN or an "
                      "infinity (stored as 0), with --dtype f32 where it is a value the coded "
                      "dtype cannot hold", err)

    def test_skip_policy(self):
        x = np.load(self.mfcc(self.ids[4]))
        x[1, 1] = np.nan
        np.save(self.mfcc(self.ids[4]), x)
        out = os.path.join(self.tmp, "out")
        rc, stdout, err = run("pack", self.raw, out, "--on-error", "skip")
        self.assertEqual(rc, 0, err)
        self.assertIn("skipped: " + self.mfcc(self.ids[4]) + ": NaN", err)
        self.assertIn("skipped 1 bad utterance", stdout)
        rc, info, _ = run("info", out)
        self.assertIn("4 (1 skipped at pack time)", info)
        self.assertIn(self.ids[4] + "\t" + self.mfcc(self.ids[4]) + ": NaN", info)
        self.assertEqual(run("verify", out)[0], 0)


class Inputs(Base):
    """Accepted input variants pack to the same windows as the plain form."""

    def windows(self, out):
        x = os.path.join(self.tmp, "x.npy")
        y = os.path.join(self.tmp, "y.npy")
        rc, said, err = run("gather", out, "--context", 2, "--all", "--out", x, "--labels", y)
        self.assertEqual(rc, 0, err)
        n = len(np.load(y))
        self.assertIn(f"wrote {x}: {n} windows of ", said)  # says what it wrote
        self.assertIn(f"wrote {y}: {n} labels (int64)", said)
        return np.load(x), np.load(y)

    def test_variants(self):
        base = os.path.join(self.tmp, "base")
        self.assertEqual(run("pack", self.raw, base, "--quiet")[0], 0)
        X0, Y0 = self.windows(base)
        a, b, c, d, e = self.ids
        x = np.load(self.mfcc(a))
        np.save(self.mfcc(a), np.asfortranarray(x))                  # Fortran order
        np.save(self.mfcc(b), np.load(self.mfcc(b)).astype(">f4"))    # big-endian f4
        np.save(self.mfcc(c), np.load(self.mfcc(c)).astype(np.float64).astype(">f8"))
        t = np.load(self.trans(d))
        np.save(self.trans(d), t.astype("S5"))                         # bytes transcript
        vocab = ["[SIL]", "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER",
                 "EY", "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY",
                 "P", "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH", "[SOS]",
                 "[EOS]"]
        t = np.load(self.trans(e))
        np.save(self.trans(e), np.array([vocab.index(s) for s in t], dtype=np.int16))
        out = os.path.join(self.tmp, "variants")
        rc, _, err = run("pack", self.raw, out, "--quiet")
        self.assertEqual(rc, 0, err)
        X1, Y1 = self.windows(out)
        self.assertTrue(np.array_equal(X0.view(np.uint32), X1.view(np.uint32)))
        self.assertTrue(np.array_equal(Y0, Y1))

    def test_float16_input(self):
        x = np.load(self.mfcc(self.ids[0])).astype(np.float16)
        np.save(self.mfcc(self.ids[0]), x)
        out = os.path.join(self.tmp, "o")
        self.assertEqual(run("pack", self.raw, out, "--quiet")[0], 0)
        X, _ = self.windows(out)
        self.assertTrue(np.array_equal(X[0, 2 * 28:3 * 28], x[0].astype(np.float32)))

    def test_misspelled_transcript_dir(self):
        os.rename(os.path.join(self.raw, "transcript"), os.path.join(self.raw, "transcripts"))
        os.mkdir(os.path.join(self.raw, "wav"))
        want = (f"{self.raw}/transcripts/ holds 5 .npy files named like those of mfcc/ but is "
                f"not read: did you mean transcript/? Rename it (mv {self.raw}/transcripts "
                f"{self.raw}/transcript) to pack the labels")
        rc, out, err = run("check", self.raw)
        self.assertEqual(rc, 0, err)
        self.assertIn(want, err)
        self.assertIn(f"{self.raw}/wav/ is not used (pack reads mfcc/ and transcript/ only)", err)
        self.assertIn("features only", out)
        rc, out, err = run("pack", self.raw, os.path.join(self.tmp, "out"))
        self.assertEqual(rc, 0, err)
        self.assertIn(want, err)
        self.assertIn(f"  features only: no transcript/ directory in {self.raw} (no labels)", out)
        # A near name with no matching files is still named.
        shutil.rmtree(os.path.join(self.raw, "transcripts"))
        os.mkdir(os.path.join(self.raw, "Transcript"))
        rc, _, err = run("check", self.raw)
        self.assertIn(f"{self.raw}/Transcript/ is not used: did you mean transcript/?", err)

    def test_renamed_start_end_symbols(self):
        # A vocabulary whose markers are <s> and </s>: --sos/--eos name them.
        vocab = os.path.join(self.tmp, "vocab.txt")
        with open(vocab, "w") as f:
            f.write("[SIL]\nAA\nAE\nAH\nAO\nAW\nAY\nB\nCH\nD\nDH\nEH\nER\nEY\nF\nG\nHH\nIH\n"
                    "IY\nJH\nK\nL\nM\nN\nNG\nOW\nOY\nP\nR\nS\nSH\nT\nTH\nUH\nUW\nV\nW\nY\nZ\n"
                    "ZH\n<s>\n</s>\n")
        want = os.path.join(self.tmp, "want")
        self.assertEqual(run("pack", self.raw, want, "--quiet")[0], 0)
        for uid in self.ids:
            t = np.load(self.trans(uid))
            t[0], t[-1] = "<s>", "</s>"
            np.save(self.trans(uid), t)
        rc, _, err = run("check", self.raw, "--vocab", vocab)
        self.assertEqual(rc, 1)
        self.assertIn(f"{self.trans(self.ids[0])}: position 0: '<s>', expected [SOS] (transcripts "
                      "with other start and end symbols: --sos SYM --eos SYM)", err)
        rc, out, err = run("check", self.raw, "--vocab", vocab, "--sos", "<s>", "--eos", "</s>")
        self.assertEqual(rc, 0, err)
        got = os.path.join(self.tmp, "got")
        rc, _, err = run("pack", self.raw, got, "--vocab", vocab, "--sos", "<s>", "--eos", "</s>",
                         "--quiet")
        self.assertEqual(rc, 0, err)
        # Same labels and indices as the default markers give.
        for name in ("manifest.cxs", "shard-000000.cxs"):
            a, b = open(os.path.join(want, name), "rb").read(), open(os.path.join(got, name), "rb").read()
            self.assertEqual(len(a), len(b), name)
        rc, _, err = run("check", self.raw, "--sos", "x", "--eos", "x")
        self.assertEqual(rc, 2)
        self.assertIn("--sos and --eos are both 'x'; the start and end symbols must differ", err)

    def test_no_transcripts_beside_a_train_name(self):
        shutil.rmtree(os.path.join(self.raw, "transcript"))
        rc, _, err = run("check", self.raw)
        self.assertEqual(rc, 0, err)
        self.assertIn(f"{self.raw}: no transcript/ directory: features only, without labels (a "
                      f"train or dev split needs {self.raw}/transcript/<id>.npy; only a test "
                      "split has none)", err)
        test = os.path.join(self.tmp, "test-clean")
        os.rename(self.raw, test)
        rc, out, err = run("check", test)
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("features only", out)

    def test_misspelled_mfcc_dir(self):
        os.rename(os.path.join(self.raw, "mfcc"), os.path.join(self.raw, "MFCCs"))
        rc, _, err = run("check", self.raw)
        self.assertEqual(rc, 1)
        self.assertIn(f"{self.raw}/MFCCs/ is there: did you mean mfcc/?", err)

    def test_features_only(self):
        shutil.rmtree(os.path.join(self.raw, "transcript"))
        out = os.path.join(self.tmp, "test-split")
        rc, _, err = run("pack", self.raw, out, "--quiet")
        self.assertEqual(rc, 0, err)
        rc, info, _ = run("info", out)
        self.assertIn("labels        none (features only)", info)
        rc, _, err = run("gather", out, "--context", 1, "--frames", "0", "--out",
                         os.path.join(self.tmp, "x.npy"), "--labels", os.path.join(self.tmp, "y.npy"))
        self.assertEqual(rc, 2)
        self.assertIn("no labels", err)
        self.assertEqual(run("verify", out)[0], 0)


class Output(Base):
    def pack(self, out, *extra):
        rc, _, err = run("pack", self.raw, out, "--quiet", *extra)
        self.assertEqual(rc, 0, err)

    def test_tools_name_coded_dtypes(self):
        """stats and bench-read name q8 and q16 (they called both bfloat16)."""
        for dtype in ("q8", "q16"):
            out = os.path.join(self.tmp, dtype)
            self.pack(out, "--dtype", dtype)
            rc, text, err = run("stats", out, "--no-scan")
            self.assertEqual(rc, 0, err)
            self.assertIn(f"dim 28, {dtype}\n", text.splitlines(True)[0])
            rc, text, err = run("stats", "--compare", out, out, "--no-scan")
            self.assertEqual(rc, 0, err)
            self.assertRegex(text, rf"dtype +{dtype} +{dtype}\n")
            rc, text, err = run("bench-read", out, "--batches", 2, "--threads", 1)
            self.assertEqual(rc, 0, err)
            self.assertIn(f"dim 28, {dtype};", text)

    def test_guard_only_block_names_its_rows(self):
        # A FEATURES block wholly inside the leading guard rows (80 dims,
        # guard 300: block 0 of 64 KiB is rows 0 to 204) is named by its
        # own rows, not "rows 0..0" (spec 1.3 text revision).
        raw = os.path.join(self.tmp, "raw80")
        rc, _, err = run("synth", raw, "--utts", 3, "--dim", 80, "--quiet")
        self.assertEqual(rc, 0, err)
        out = os.path.join(self.tmp, "g300")
        rc, _, err = run("pack", raw, out, "--guard", 300, "--quiet")
        self.assertEqual(rc, 0, err)
        shard = os.path.join(out, "shard-000000.cxs")
        off, _ = sections(shard)[4]
        with open(shard, "r+b") as f:
            f.seek(off + 100)
            b = f.read(1)
            f.seek(off + 100)
            f.write(bytes([b[0] ^ 1]))
        rc, _, err = run("verify", out)
        self.assertEqual(rc, 1, err)
        self.assertIn("FEATURES block 0 of", err)
        self.assertIn("rows 0..205): checksum mismatch; the block holds guard rows only", err)

    def test_convert_refuses_a_damaged_block(self):
        # One label changed on disk: convert must not write it into a new
        # dataset under fresh checksums (which would then verify OK).
        out = os.path.join(self.tmp, "ds")
        self.pack(out)
        shard = os.path.join(out, "shard-000000.cxs")
        off, _ = sections(shard)[5]
        with open(shard, "r+b") as f:
            f.seek(off + 10)
            b = f.read(1)
            f.seek(off + 10)
            f.write(bytes([b[0] ^ 1]))
        z = os.path.join(self.tmp, "z")
        rc, _, err = run("convert", out, z, "--compress", "zstd", "--quiet")
        self.assertEqual(rc, 1, err)
        self.assertIn("LABELS block 0 of", err)
        self.assertIn("nothing written", err)
        self.assertFalse(os.path.exists(z))

    def test_shards_without_manifest_is_a_usage_error(self):
        # spec 1.1: a path that exists but is not a dataset exits 2, naming
        # what it most likely is; a path that does not exist exits 3
        out = os.path.join(self.tmp, "ds")
        self.pack(out)
        os.unlink(os.path.join(out, "manifest.cxs"))
        rc, _, err = run("verify", out)
        self.assertEqual(rc, 2, err)
        self.assertIn("shard files but no manifest.cxs", err)

    def test_progress_bar_only_on_a_terminal(self):
        out = os.path.join(self.tmp, "out")
        rc, _, err = run("pack", self.raw, out)
        self.assertEqual(rc, 0)
        self.assertNotIn("pack [", err)  # not a tty: no bar
        if not shutil.which("script"):
            self.skipTest("script(1) is not installed")
        log = os.path.join(self.tmp, "tty.log")
        for args, bar in (([], True), (["--quiet"], False)):
            subprocess.run(["script", "-qec", " ".join([EXE, "pack", self.raw, out] + args), log],
                           check=True, capture_output=True)
            text = open(log, errors="replace").read()
            self.assertEqual("pack [" in text and "100% 5/5 utterances" in text, bar, text)
            rc = subprocess.run(["script", "-qec", f"{EXE} verify {out}", log],
                                capture_output=True).returncode
            self.assertEqual(rc, 0)

    def test_deterministic_across_threads(self):
        a, b = os.path.join(self.tmp, "a"), os.path.join(self.tmp, "b")
        self.pack(a, "--threads", 1, "--shard-size", "300K")
        self.pack(b, "--threads", 2, "--shard-size", "300K")
        names = sorted(os.listdir(a))
        self.assertGreater(len(names), 2)  # several shards
        self.assertEqual(names, sorted(os.listdir(b)))
        for n in names:
            self.assertTrue(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False), n)

    def test_replace_previous_dataset(self):
        out = os.path.join(self.tmp, "out")
        self.pack(out, "--dtype", "f16")
        self.pack(out)
        rc, info, _ = run("info", out, "--json")
        self.assertIn('"dtype": "float32"', info)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["out", "raw"])

    def test_refuses_to_replace_other_directory(self):
        out = os.path.join(self.tmp, "precious")
        os.makedirs(out)
        open(os.path.join(out, "notes.txt"), "w").write("keep me")
        rc, _, err = run("pack", self.raw, out)
        self.assertEqual(rc, 2)
        self.assertIn("is not a ctxshard dataset", err)
        self.assertEqual(os.listdir(out), ["notes.txt"])

    def test_failed_pack_keeps_previous(self):
        out = os.path.join(self.tmp, "out")
        self.pack(out)
        before = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
        x = np.load(self.mfcc(self.ids[4]))
        x[0, 0] = np.nan
        np.save(self.mfcc(self.ids[4]), x)
        rc, _, _ = run("pack", self.raw, out, "--dtype", "bf16")
        self.assertEqual(rc, 1)
        after = {n: open(os.path.join(out, n), "rb").read() for n in os.listdir(out)}
        self.assertEqual(before, after)
        self.assertEqual(sorted(os.listdir(self.tmp)), ["out", "raw"])

    def test_corruption_matrix(self):
        out = os.path.join(self.tmp, "out")
        self.pack(out)
        shard = os.path.join(out, "shard-000000.cxs")
        manifest = os.path.join(out, "manifest.cxs")
        names = {1: "SHARD_META", 2: "INDEX", 3: "IDS", 4: "FEATURES", 5: "LABELS",
                 8: "SEQUENCES", 9: "BLOCKSUMS", 16: "DATASET_META", 17: "SHARD_TABLE",
                 18: "VOCAB", 19: "STATS"}
        payload = {4, 5}  # read only by verify
        deferred = {2, 3, 8}  # format 1.3 (BLOCKSUMS): checked at the first use of a block
        for path in (shard, manifest):
            for typ, (off, length) in sections(path).items():
                for pos in (off, off + length // 2, off + length - 1):
                    data = bytearray(open(path, "rb").read())
                    orig = bytes(data)
                    data[pos] ^= 0x10
                    open(path, "wb").write(bytes(data))
                    rc, _, err = run("verify", out)
                    self.assertEqual(rc, 1, (names[typ], pos))
                    self.assertIn(path, err)
                    if typ == 4 and "guard" not in err and "NaN" not in err:
                        self.assertIn("FEATURES", err)
                    elif typ != 4:
                        self.assertIn(names[typ], err)
                    rc_open = run("info", out)[0]
                    if typ in deferred:  # open checks the ends only (spec section 8)
                        self.assertIn(rc_open, (0, 1), (names[typ], pos))
                    else:
                        self.assertEqual(rc_open, 0 if typ in payload else 1, (names[typ], pos))
                    if typ == 2 and rc_open == 0:  # refused where the block is used
                        g = run("gather", out, "--context", 2, "--all", "--out",
                                os.path.join(self.tmp, "g.npy"))
                        self.assertEqual(g[0], 1, (names[typ], pos, g[2]))
                        self.assertIn("INDEX", g[2])
                    open(path, "wb").write(orig)
            # header bytes and section table
            for pos in (9, 16, 70, 100):
                data = bytearray(open(path, "rb").read())
                orig = bytes(data)
                data[pos] ^= 0x01
                open(path, "wb").write(bytes(data))
                self.assertEqual(run("verify", out)[0], 1)
                self.assertEqual(run("info", out)[0], 1)
                open(path, "wb").write(orig)
        for cut in (100, 4096, os.path.getsize(shard) - 1):
            data = open(shard, "rb").read()
            open(shard, "wb").write(data[:cut])
            rc, _, err = run("info", out)
            self.assertEqual(rc, 1)
            self.assertIn(shard, err)
            self.assertEqual(run("verify", out)[0], 1)
            open(shard, "wb").write(data)
        self.assertEqual(run("verify", out)[0], 0)


class Usage(unittest.TestCase):
    def test_help_and_version(self):
        for cmd in ("synth", "check", "pack", "verify", "info", "gather", "bench-read"):
            rc, out, _ = run(cmd, "--help")
            self.assertEqual(rc, 0)
            self.assertTrue(out.startswith("usage: ctxshard " + cmd), out)
        rc, out, _ = run("--version")
        self.assertEqual(rc, 0)
        self.assertRegex(out, r"^ctxshard \d+\.\d+\.\d+ \(format 1\.4\)\n$")

    def test_help_lists_every_dtype(self):
        """Every command that takes --dtype to store features lists the
        coded types, which it takes."""
        for cmd in ("pack", "import", "convert"):
            rc, out, _ = run(cmd, "--help")
            self.assertEqual(rc, 0, cmd)
            lists = [m for m in re.findall(r"--dtype[^\n]*(?:\n {10,}[^\n]*)*", out) if "f16" in m]
            self.assertTrue(lists, cmd)
            for m in lists:
                self.assertIn("q8", m, cmd)
                self.assertIn("q16", m, cmd)

    def test_usage_errors(self):
        for args in (["frobnicate"], ["pack", "onlyone"], ["pack", "a", "b", "--dtype", "f8"],
                     ["pack", "a", "b", "--shard-size", "12Q"],
                     ["pack", "a", "b", "--shard-size", "1.5"],  # a fraction needs a unit
                     ["pack", "a", "b", "--shard-size", "1.G"], ["info", "x", "--context", "3"],
                     ["gather", "x", "--all"], ["synth", "r", "--utts", "-1"], []):
            rc, _, err = run(*args)
            self.assertEqual(rc, 2, args)
            self.assertTrue(err, args)

    def test_missing_dataset(self):
        rc, _, err = run("verify", "/nonexistent/ds")
        self.assertEqual(rc, 3)
        self.assertIn("/nonexistent/ds", err)
        rc, _, err = run("check", "/nonexistent/raw")
        self.assertEqual(rc, 1)
        self.assertIn("/nonexistent/raw", err)

    def test_info_exact(self):
        tiny = os.path.join(SRC, "tests", "golden", "valid", "tiny")
        rc, out, _ = run("info", "tiny", cwd=os.path.dirname(tiny))
        self.assertEqual(rc, 0)
        expected = open(os.path.join(SRC, "tests", "cli", "info_tiny.txt")).read()
        self.assertEqual(out, expected)

    def test_info_exact_sequences_only(self):
        """Spec 5.6: info reports the stored width of the symbols of a
        dataset of label sequences only (its label_width reads 0)."""
        valid = os.path.join(SRC, "tests", "golden", "valid")
        rc, out, _ = run("info", "tiny-seq-only", cwd=valid)
        self.assertEqual(rc, 0)
        expected = open(os.path.join(SRC, "tests", "cli", "info_tiny_seq_only.txt")).read()
        self.assertEqual(out, expected)
        import json
        rc, out, _ = run("info", "tiny-seq-only", "--json", cwd=valid)
        j = json.loads(out)
        self.assertEqual(j["label_width"], 0)
        self.assertEqual(j["label_sequences"]["width"], 1)
        # Its shard opened alone has no vocabulary; the width is SHARD_META's.
        shard = os.path.join("tiny-seq-only", "shard-000000.cxs")
        rc, out, err = run("info", shard, "--json", cwd=valid)
        self.assertEqual(rc, 0, err)
        j = json.loads(out)
        self.assertEqual((j["vocab"], j["label_width"]), ([], 0))
        self.assertEqual(j["label_sequences"]["width"], 1)
        rc, out, err = run("info", shard, cwd=valid)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"(?m)^sequences .*stored as uint8")

    def test_info_json(self):
        import json
        tiny = os.path.join(SRC, "tests", "golden", "valid", "tiny")
        rc, out, _ = run("info", tiny, "--json")
        self.assertEqual(rc, 0)
        j = json.loads(out)
        self.assertEqual((j["utterances"], j["frames"], j["dim"], j["guard"], j["dtype"]),
                         (2, 5, 2, 1, "float32"))
        self.assertEqual(j["vocab"], ["[SIL]", "AA", "B", "[SOS]", "[EOS]"])
        self.assertEqual(j["stats"]["label_counts"], [1, 1, 3, 0, 0])
        self.assertEqual(j["stats"]["mean"], [6.2, 7.2])
        self.assertEqual(j["pack_options"]["on_error"], "fail")
        self.assertEqual(j["format_version"], "1.0")
        self.assertIs(j["incomplete"], False)

    def test_synth_deterministic(self):
        with tempfile.TemporaryDirectory() as tmp:
            for name, seed in (("a", 5), ("b", 5), ("c", 6)):
                rc, _, err = run("synth", os.path.join(tmp, name), "--utts", 3, "--seed", seed,
                                 "--quiet")
                self.assertEqual(rc, 0, err)
            cmp = filecmp.dircmp(os.path.join(tmp, "a", "mfcc"), os.path.join(tmp, "b", "mfcc"))
            self.assertEqual(len(cmp.common), 3)
            for n in cmp.common:
                for sub in ("mfcc", "transcript"):
                    pa, pb = (os.path.join(tmp, x, sub, n) for x in "ab")
                    self.assertTrue(filecmp.cmp(pa, pb, shallow=False))
                    pc = os.path.join(tmp, "c", sub, n)
                    self.assertFalse(os.path.exists(pc) and filecmp.cmp(pa, pc, shallow=False))
            x = np.load(os.path.join(tmp, "a", "mfcc", cmp.common[0]))
            self.assertTrue(100 <= x.shape[0] <= 3500 and x.shape[1] == 28)
            rc, _, err = run("synth", os.path.join(tmp, "a"), "--utts", 1)
            self.assertEqual(rc, 2)
            self.assertIn("exists and is not empty", err)

    def test_bench_read(self):
        tiny = os.path.join(SRC, "tests", "golden", "valid", "tiny")
        for sampler in ("shuffle", "sequential", "weighted"):
            rc, out, err = run("bench-read", tiny, "--context", 3, "--batch", 2, "--batches", 7,
                               "--threads", 2, "--sampler", sampler)
            self.assertEqual(rc, 0, err)
            self.assertIn("7 batches, 12 samples", out)  # epochs of 2+2+1
            self.assertIn("samples/s", out)
            self.assertIn(sampler + " sampler", out)
        rc, _, err = run("bench-read", tiny, "--batch", 0)
        self.assertEqual(rc, 2)
        rc, _, err = run("bench-read", tiny, "--sampler", "random")
        self.assertEqual(rc, 2)
        self.assertIn("'random' is not shuffle, sequential, weighted or block", err)

    def test_order_stats(self):
        """bench-read --order-stats: the sequential row against numpy over
        the utterance lengths; a full shuffle spreads utterances over the
        epoch, the block order in between; block needs --memory."""
        with tempfile.TemporaryDirectory() as tmp:
            raw, ds = os.path.join(tmp, "raw"), os.path.join(tmp, "ds")
            self.assertEqual(run("synth", raw, "--utts", 40, "--seed", 2, "--quiet")[0], 0)
            self.assertEqual(run("pack", raw, ds, "--guard", 8, "--quiet")[0], 0)
            rc, out, err = run("bench-read", ds, "--order-stats", "--batch", 256,
                               "--memory", "4M")
            self.assertEqual(rc, 0, err)
            rows = {ln.split()[0]: ln.split()[1:] for ln in out.splitlines()
                    if ln.split() and ln.split()[0] in ("sequential", "shuffle", "block")}
            self.assertEqual(sorted(rows), ["block", "sequential", "shuffle"])
            names = sorted(os.listdir(os.path.join(raw, "mfcc")))
            lens = [np.load(os.path.join(raw, "mfcc", n), mmap_mode="r").shape[0] for n in names]
            utt = np.repeat(np.arange(len(lens)), lens)
            B, nb = 256, -(-len(utt) // 256)
            full = [len(np.unique(utt[b * B:(b + 1) * B])) for b in range(len(utt) // B)]
            first = np.array([np.searchsorted(utt, u) // B for u in range(len(lens))])
            last = np.array([(np.searchsorted(utt, u, "right") - 1) // B for u in range(len(lens))])
            spread = np.sort((last - first) / (nb - 1))
            want = ["%.1f" % np.mean(full), str(min(full))] + \
                ["%.4f" % spread[i] for i in (len(lens) // 10, len(lens) // 2, len(lens) * 9 // 10)]
            self.assertEqual(rows["sequential"], want)
            med = {k: float(v[3]) for k, v in rows.items()}
            self.assertGreater(med["shuffle"], 0.9)
            self.assertLess(med["sequential"], med["block"])
            self.assertLess(med["block"], med["shuffle"])
            self.assertGreater(float(rows["shuffle"][0]), float(rows["block"][0]))
            rc, out, err = run("bench-read", ds, "--order-stats")
            self.assertEqual(rc, 0, err)
            self.assertIn("block       (give --memory SIZE for the block order)", out)
            rc, out, err = run("bench-read", ds, "--order-stats", "--memory", "100K")
            self.assertEqual(rc, 2, err)
            self.assertIn("cannot hold the longest utterance", err)
            rc, out, err = run("bench-read", ds, "--sampler", "block", "--memory", "100K")
            self.assertEqual(rc, 2, err)
            # --blocks: more, smaller blocks to draw from; batches then mix
            # more utterances
            rc, out16, err = run("bench-read", ds, "--order-stats", "--batch", 256,
                                 "--memory", "8M", "--blocks", 16)
            self.assertEqual(rc, 0, err)
            self.assertIn("16 drawn from at once", out16)
            rc, out2, err = run("bench-read", ds, "--order-stats", "--batch", 256,
                                "--memory", "8M", "--blocks", 2)
            self.assertEqual(rc, 0, err)
            self.assertIn("2 drawn from at once", out2)
            per_batch = [float(next(ln.split()[1] for ln in o.splitlines()
                                    if ln.startswith("block ")))
                         for o in (out2, out16)]
            self.assertLess(per_batch[0], per_batch[1])
            rc, out, err = run("bench-read", ds, "--sampler", "block", "--memory", "8M",
                               "--blocks", 4, "--batches", 5, "--batch", 64)
            self.assertEqual(rc, 0, err)
            self.assertIn("4 drawn from at once", out)
            for bad in ("0", "1025", "x"):
                rc, out, err = run("bench-read", ds, "--order-stats", "--blocks", bad)
                self.assertEqual(rc, 2, err)
                self.assertIn("--blocks: '%s' is not a count in 1..1024" % bad, err)

    def test_gpu(self):
        # the probe: exit 3 with the reason when no device is usable
        rc, out, err = run("gpu", "--json")
        import json
        probe = json.loads(out)
        self.assertEqual(rc, 0 if probe["usable"] else 3)
        if not probe["usable"]:
            self.assertTrue(probe["reason"])
        rc, out, err = run("gpu", "--emulate")
        self.assertEqual(rc, 0, err)
        self.assertIn("host emulation", out)
        # every mode, every batch read back and compared with the CPU gather
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        raw, ds = os.path.join(tmp, "raw"), os.path.join(tmp, "ds")
        rc, _, err = run("synth", raw, "--utts", 9, "--seed", 2, "--quiet")
        self.assertEqual(rc, 0, err)
        rc, _, err = run("pack", raw, ds, "--guard", 2, "--quiet")
        self.assertEqual(rc, 0, err)
        budgets = {"auto": "2M", "stream": "2M", "resident": "8M", "pool": "3500K"}
        for mode in ("auto", "stream", "resident", "pool"):
            rc, out, err = run("gpu", ds, "--emulate", "--mode", mode, "--context", 5, "--batch", 333,
                               "--check", "--budget", budgets[mode], "--threads", 2)
            self.assertEqual(rc, 0, err)
            self.assertIn("every window and label equals the CPU gather", out)
            self.assertIn("mode          " + ("stream" if mode == "auto" else mode), out)
        rc, out, err = run("gpu", ds, "--emulate", "--mode", "resident", "--bf16", "--normalize",
                           "--check", "--batches", 3, "--json")
        self.assertEqual(rc, 0, err)
        got = json.loads(out)
        self.assertEqual((got["mode"], got["batches"], got["checked"]), ("resident", 3, True))
        self.assertEqual(got["upload_path"], "registered mapping")
        # options that cannot work: usage errors with the reason
        rc, _, err = run("gpu", ds, "--emulate", "--mode", "resident", "--budget", "100K")
        self.assertEqual(rc, 2)
        self.assertIn("resident mode needs", err)
        rc, _, err = run("gpu", ds, "--emulate", "--mode", "stream", "--bf16")
        self.assertEqual(rc, 2)
        self.assertIn("float32 only", err)
        rc, _, err = run("gpu", ds, "--mode", "fast")
        self.assertEqual(rc, 2)
        rc, _, err = run("gpu", ds, ds)
        self.assertEqual(rc, 2)
        if not probe["usable"]:
            rc, _, err = run("gpu", ds)
            self.assertEqual(rc, 3)
            self.assertIn(probe["reason"], _ + err)

    def test_pack_makes_parents(self):
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, "raw")
            self.assertEqual(run("synth", raw, "--utts", 2, "--quiet")[0], 0)
            out = os.path.join(tmp, "new", "parts", "p1")
            rc, _, err = run("pack", raw, out, "--quiet")
            self.assertEqual(rc, 0, err)
            self.assertTrue(os.path.exists(os.path.join(out, "manifest.cxs")))
            rc, _, err = run("merge", out, os.path.join(tmp, "m", "x"))  # not a part
            self.assertEqual(rc, 1)
            self.assertFalse(os.path.exists(os.path.join(tmp, "m")), "merge left its parent")
            # A failed pack takes away the directories it made.
            bad = os.path.join(raw, "mfcc", sorted(os.listdir(os.path.join(raw, "mfcc")))[0])
            x = np.load(bad)
            x[0, 0] = np.nan
            np.save(bad, x)
            rc, _, err = run("pack", raw, os.path.join(tmp, "new2", "a", "out"), "--quiet")
            self.assertEqual(rc, 1, err)
            self.assertFalse(os.path.exists(os.path.join(tmp, "new2")))
            # A file in the way is named.
            open(os.path.join(tmp, "afile"), "w").close()
            rc, _, err = run("pack", raw, os.path.join(tmp, "afile", "out"), "--quiet")
            self.assertNotEqual(rc, 0)
            self.assertIn(f"cannot create its parent directory: {tmp}/afile is not a directory",
                          err)

    def test_synth_makes_parents(self):
        with tempfile.TemporaryDirectory() as tmp:
            rc, _, err = run("synth", os.path.join(tmp, "a", "b", "raw"), "--utts", 1, "--quiet")
            self.assertEqual(rc, 0, err)
            self.assertEqual(len(os.listdir(os.path.join(tmp, "a", "b", "raw", "mfcc"))), 1)

    def test_gather_exact(self):
        tiny = os.path.join(SRC, "tests", "golden", "valid", "tiny")
        with tempfile.TemporaryDirectory() as tmp:
            x, y = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
            rc, _, err = run("gather", tiny, "--context", 2, "--frames", "0,4,1-2", "--out", x,
                             "--labels", y)
            self.assertEqual(rc, 0, err)
            X = np.load(x)
            self.assertEqual(X.tolist(), [
                [0, 0, 0, 0, 1, 2, 3, 4, 5, 6],
                [0, 0, 10, 11, 12, 13, 0, 0, 0, 0],
                [0, 0, 1, 2, 3, 4, 5, 6, 0, 0],
                [1, 2, 3, 4, 5, 6, 0, 0, 0, 0]])
            self.assertEqual(np.load(y).tolist(), [1, 2, 2, 0])
            rc, _, err = run("gather", tiny, "--context", 1, "--frames", "5", "--out", x)
            self.assertEqual(rc, 2)
            self.assertIn("frame 5 is past the end (the dataset has 5 frames)", err)

    def test_stats_from_needs_the_same_normalize(self):
        """Spec 7.4: another dataset's statistics are refused when its
        normalize (or dim) differs: statistics of per-utterance normalised
        values do not describe values stored without it, nor the reverse
        (a usage error, exit 2); the same setting is accepted."""
        with tempfile.TemporaryDirectory() as tmp:
            raw = os.path.join(tmp, "raw")
            self.assertEqual(run("synth", raw, "--utts", 3, "--seed", 5, "--quiet")[0], 0)
            plain, norm, x = (os.path.join(tmp, n) for n in ("plain", "norm", "x.npy"))
            self.assertEqual(run("pack", raw, plain, "--quiet")[0], 0)
            self.assertEqual(run("pack", raw, norm, "--normalize", "utterance", "--quiet")[0], 0)
            for train, dev in ((norm, plain), (plain, norm)):
                rc, _, err = run("gather", dev, "--context", 1, "--frames", "0",
                                 "--out", x, "--stats-from", train)
                self.assertEqual(rc, 2, err)
                self.assertIn("pack both splits with the same --normalize", err)
                self.assertFalse(os.path.exists(x))
            rc, _, err = run("gather", plain, "--context", 1, "--frames", "0", "--out", x,
                             "--stats-from", plain)
            self.assertEqual(rc, 0, err)

    def test_gather_labels_damaged_names_the_shard(self):
        """A label outside the vocabulary (golden labels-vocab: frame 3's
        label is 9 of 5 symbols) is the dataset's fault: the message names
        the shard, the frame and its utterance, not the labels' output."""
        bad = os.path.join(SRC, "tests", "golden", "invalid", "labels-vocab")
        with tempfile.TemporaryDirectory() as tmp:
            x, y = os.path.join(tmp, "tx.npy"), os.path.join(tmp, "ty.npy")
            rc, _, err = run("gather", bad, "--context", 1, "--all", "--out", x, "--labels", y)
            self.assertEqual(rc, 1, err)
            self.assertIn(os.path.join(bad, "shard-000000.cxs") + ": the label of frame 3", err)
            self.assertNotIn("ty.npy:", err)
            self.assertIn("frame 3 (utterance 1, 'b', frame 0 of it)", err)
            self.assertIn("outside the vocabulary", err)
            self.assertFalse(os.path.exists(y))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
