"""ctxshard.Writer and ctxshard.pack: byte-identical to `ctxshard pack` of
the same utterances written as files (stored dtypes, input dtypes, memory
orders, byte orders, compression, labels in every form, features only,
shard sizes, normalisation); every packer rejection reproduced with the same
reason, the writer usable after it; abort, exceptions and kill -9 during a
commit leave nothing; progress; the from_audio example end to end.

usage: /usr/bin/python3 tests/python/writer_test.py BUILD_DIR SOURCE_ROOT"""
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import unittest
import warnings

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402
from testenv import same_dataset  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-writer-")
# the fault-injection hooks (CXS_PACK_FAULT) exist only in builds
# configured with -Dtest_hooks=true; meson says which
HOOKS = os.environ.get("CXS_TEST_HOOKS") == "1"


def run(*args, check=True):
    return subprocess.run([EXE, *map(str, args)], check=check, capture_output=True, text=True)


def raw_utterances(raw):
    """[(id, features, transcript or None)] of a raw directory, in id order."""
    out = []
    for f in sorted(glob.glob(os.path.join(raw, "mfcc", "*.npy"))):
        i = os.path.basename(f)[:-4]
        t = f.replace(os.sep + "mfcc" + os.sep, os.sep + "transcript" + os.sep)
        out.append((i, np.load(f), np.load(t) if os.path.exists(t) else None))
    return out


def no_leftovers(test, parent):
    left = [n for n in os.listdir(parent) if ".tmp-" in n]
    test.assertEqual(left, [], f"temporary directories left in {parent}")


def setUpModule():
    run("synth", os.path.join(TMP, "raw"), "--utts", 24, "--seed", 9, "--quiet")
    run("synth", os.path.join(TMP, "raw64"), "--utts", 10, "--seed", 3, "--dtype", "f64",
        "--quiet")
    run("synth", os.path.join(TMP, "test"), "--utts", 10, "--seed", 5, "--no-transcripts",
        "--quiet")
    # float16 input files (synth writes f32 or f64)
    r16 = os.path.join(TMP, "raw16")
    shutil.copytree(os.path.join(TMP, "raw"), r16)
    for f in glob.glob(os.path.join(r16, "mfcc", "*.npy")):
        np.save(f, np.load(f).astype(np.float16))


def tearDownModule():
    shutil.rmtree(TMP)


class Identity(unittest.TestCase):
    CASES = [  # (raw, CLI options, Writer/pack keywords)
        ("raw", [], {}),
        ("raw", ["--dtype", "f16", "--shard-size", "200K"], {"dtype": "float16",
                                                              "shard_size": "200K"}),
        ("raw", ["--dtype", "bf16", "--guard", 0], {"dtype": "bfloat16", "guard": 0}),
        ("raw", ["--compress", "zstd", "--shard-size", "300K"], {"compress": "zstd",
                                                                 "shard_size": 300 << 10}),
        ("raw", ["--compress", "zstd:7", "--dtype", "f16", "--chunk-size", "8K", "--no-shuffle"],
         {"compress": 7, "dtype": "f16", "chunk_size": "8K", "shuffle": False, "threads": 3}),
        ("raw", ["--compress", "zstd", "--threads", "1"], {"compress": "zstd", "threads": 2}),
        ("raw", ["--normalize", "utterance", "--guard", 5], {"normalize": "utterance",
                                                             "guard": 5}),
        ("raw64", ["--dtype", "f16"], {"dtype": np.float16}),
        ("raw16", ["--shard-size", "100K"], {"shard_size": "100K"}),
        ("test", [], {}),
        ("test", ["--compress", "zstd", "--dtype", "bf16"], {"compress": "zstd",
                                                             "dtype": "bfloat16"}),
    ]

    def test_writer_and_pack_match_the_command(self):
        for n, (raw, cli, kw) in enumerate(self.CASES):
            with self.subTest(raw=raw, cli=cli):
                src = os.path.join(TMP, raw)
                ref, viapack, viaw = (os.path.join(TMP, f"id{n}-{s}") for s in "cpw")
                run("pack", src, ref, "--quiet", *cli)
                ctxshard.pack(src, viapack, **kw)
                self.assertIsNone(same_dataset(ref, viapack))
                utts = raw_utterances(src)
                vocab = "phonemes" if utts[0][2] is not None else None
                with ctxshard.Writer(viaw, vocab=vocab, **kw) as w:
                    for i, x, t in utts:
                        self.assertTrue(w.add(i, x, labels=t))
                self.assertIsNone(same_dataset(ref, viaw))

    def test_memory_orders_byte_orders_and_label_forms(self):
        utts = raw_utterances(os.path.join(TMP, "raw"))[:8]
        ref = os.path.join(TMP, "forms-ref")
        with ctxshard.Writer(ref, vocab="phonemes", shard_size="200K") as w:
            for i, x, t in utts:
                w.add(i, x, labels=t)
        index = {s: j for j, s in enumerate(ctxshard.PHONEMES)}
        forms = {
            "fortran": lambda x, t: (np.asfortranarray(x), t),
            "big-endian": lambda x, t: (x.astype(">f4"), t),
            "float64": lambda x, t: (x.astype(np.float64), t),
            "negative strides": lambda x, t: (np.ascontiguousarray(x[::-1])[::-1], t),
            "column slice": lambda x, t: (np.concatenate([x, x], 1)[:, :x.shape[1]], t),
            "read-only": lambda x, t: (np.frombuffer(x.tobytes(), x.dtype).reshape(x.shape), t),
            "row slice of one array": lambda x, t: (np.concatenate([x, x])[len(x):], t),
            "symbols per frame": lambda x, t: (x, t[1:-1]),
            "indices, transcript form": lambda x, t: (x, np.array([index[s] for s in t],
                                                                  dtype=np.int32)),
            "indices per frame": lambda x, t: (x, np.array([index[s] for s in t[1:-1]],
                                                           dtype=np.uint8)),
            "list of str": lambda x, t: (x.tolist(), list(t)),
            "big-endian int64": lambda x, t: (x, np.array([index[s] for s in t], dtype=">i8")),
        }
        for name, form in forms.items():
            with self.subTest(form=name):
                out = os.path.join(TMP, "forms-" + name.replace(" ", "-"))
                with ctxshard.Writer(out, vocab="phonemes", shard_size="200K") as w:
                    for i, x, t in utts:
                        xx, tt = form(x, t)
                        w.add(i, xx, labels=tt)
                self.assertIsNone(same_dataset(ref, out))

    def test_served_windows_equal_the_arrays(self):
        rng = np.random.default_rng(1)
        xs = [rng.standard_normal((int(rng.integers(1, 90)), 5)).astype(np.float32)
              for _ in range(7)]
        out = os.path.join(TMP, "served")
        with ctxshard.Writer(out, guard=3) as w:
            for n, x in enumerate(xs):
                w.add(f"u{n:02d}", x)
        with ctxshard.open(out) as ds:
            self.assertEqual((ds.num_utterances, ds.dim, ds.guard), (7, 5, 3))
            allx = np.concatenate(xs)
            got = ds.gather(np.arange(len(allx)), 0)
            np.testing.assert_array_equal(got, allx)
            self.assertEqual(ds.vocab, [])


class Rejections(unittest.TestCase):
    """Each bad utterance as files, through `ctxshard pack --on-error skip`,
    and through the Writer: the same reason; the Writer stays usable."""

    def test_same_reasons_as_the_packer(self):
        good = raw_utterances(os.path.join(TMP, "raw"))[:10]
        bad = {}  # id -> (features, transcript)
        i, x, t = good[1]
        x = x.copy()
        x[3, 2] = np.nan
        bad[i] = (x, t)
        i, x, t = good[2]
        x = x.copy()
        x[0, 0] = np.inf
        bad[i] = (x, t)
        i, x, t = good[3]
        bad[i] = (x[:, :20].copy(), t)
        i, x, t = good[4]
        t = t.copy()
        t[5] = "ZZ"
        bad[i] = (x, t)
        i, x, t = good[5]
        t = t.copy()
        t[7] = "[SOS]"
        bad[i] = (x, t)
        i, x, t = good[6]
        bad[i] = (x.astype(np.float64) * 1e300, t)  # overflows float32
        i, x, t = good[7]
        bad[i] = (x[:0].copy(), t[:2].copy())  # empty
        raw = os.path.join(TMP, "badraw")
        os.makedirs(os.path.join(raw, "mfcc"))
        os.makedirs(os.path.join(raw, "transcript"))
        for i, x, t in good:
            x, t = bad.get(i, (x, t))
            np.save(os.path.join(raw, "mfcc", i + ".npy"), x)
            np.save(os.path.join(raw, "transcript", i + ".npy"), t)
        cli = os.path.join(TMP, "bad-cli")
        run("pack", raw, cli, "--on-error", "skip", "--quiet")
        with ctxshard.open(cli) as ds:
            cli_reasons = {i: r.split(": ", 1)[1] for i, r in ds.skipped}
        self.assertEqual(set(cli_reasons), set(bad))
        out = os.path.join(TMP, "bad-writer")
        with ctxshard.Writer(out, vocab="phonemes") as w:
            for i, x, t in good:
                if i in bad:
                    with self.assertRaises(ctxshard.RejectedUtterance) as cm:
                        w.add(i, *bad[i][:1], labels=bad[i][1])
                    self.assertEqual(cm.exception.id, i)
                    self.assertTrue(str(cm.exception).startswith(i + ": "))
                    # the packer's reason, less what only a file has (its
                    # path) and where the width came from (the packer reads
                    # every header first and takes the most common width; a
                    # stream has its first utterance's)
                    self.assertEqual(cm.exception.reason.split(" (")[0].split(" like ")[0],
                                     cli_reasons[i].split(" (")[0].split(" like ")[0], i)
                    w.skip(i, cli_reasons[i])
                else:
                    self.assertTrue(w.add(i, x, labels=t))
        # the writer went on: the same dataset as the packer's, bar the path in the skip list
        with ctxshard.open(out) as a, ctxshard.open(cli) as b:
            self.assertEqual(a.ids, b.ids)
            np.testing.assert_array_equal(a.gather(np.arange(len(a)), 2),
                                          b.gather(np.arange(len(b)), 2))
            np.testing.assert_array_equal(a.labels, b.labels)

        # on_error="skip": add returns False and the dataset lists it
        out2 = os.path.join(TMP, "bad-skip")
        with ctxshard.Writer(out2, vocab="phonemes", on_error="skip") as w:
            results = {i: w.add(i, *bad.get(i, (x, t))[:1], labels=bad.get(i, (x, t))[1])
                       for i, x, t in good}
        self.assertEqual({i for i, ok in results.items() if not ok}, set(bad))
        with ctxshard.open(out2) as ds:
            self.assertEqual({i for i, _ in ds.skipped}, set(bad))
            self.assertEqual(ds.info["on_error_skip"], 1)

    def test_skip_policy_never_drops_silently(self):
        """on_error="skip": ids out of order are an error, not skips; dim=
        fixes the width up front; every skip is returned, listed and
        warned about at commit."""
        x = np.ones((6, 4), np.float32)
        out = os.path.join(TMP, "skip-order")
        ids = [f"u{n:02d}" for n in (0, 5, 1, 6, 2, 7, 3, 8, 4, 9, 10, 11)]
        with self.assertRaisesRegex(ValueError, "u01: utterance id comes after 'u05'"):
            with ctxshard.Writer(out, on_error="skip") as w:
                for i in ids:
                    w.add(i, x)
        self.assertFalse(os.path.exists(out))
        # the width: a 13-wide first utterance under dim=4 is the odd one
        w = ctxshard.Writer(out, on_error="skip", dim=4)
        self.assertFalse(w.add("a0", np.ones((6, 13), np.float32)))
        for n in range(1, 10):
            self.assertTrue(w.add(f"a{n}", x))
        self.assertEqual(w.skipped, [("a0", "13 features per frame, expected 4 (the writer's "
                                      "dim)")])
        with self.assertWarnsRegex(UserWarning, f"{out}: 1 utterance skipped, 9 written "
                                   r"\(a0: 13 features per frame"):
            counts = w.commit()
        self.assertEqual(counts["skipped"], w.skipped)
        self.assertEqual((counts["num_utterances"], counts["num_skipped"], counts["dim"]),
                         (9, 1, 4))
        with ctxshard.open(out) as ds:
            self.assertEqual(len(ds.skipped), 1)
            self.assertEqual(ds.dim, 4)
        with self.assertRaisesRegex(ValueError, "dim"):
            ctxshard.Writer(out, dim=0)
        # a clean write warns about nothing
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with ctxshard.Writer(out, dim=4) as w:
                w.add("b", x)

    def test_ids_cannot_be_cut_or_forge_lines(self):
        """A NUL in an id would cut it in the C library; a TAB or newline in
        a skipped id or reason would forge lines of the skip list (one line
        per utterance): refused, naming the id."""
        out = os.path.join(TMP, "ids-nul")
        x = np.ones((3, 2), np.float32)
        with ctxshard.Writer(out, on_error="skip") as w:
            for bad in ("spk1\x00utt9", b"spk1\x00utt9"):
                with self.assertRaisesRegex(ValueError, r"Writer.add: utterance id .*spk1\\x00utt9"
                                            ".* holds a NUL byte"):
                    w.add(bad, x)
            with self.assertRaisesRegex(ValueError, "Writer.skip: utterance id .*holds a NUL"):
                w.skip("a\x00b", "why")
            for bad in ("u1\tforged", "u1\nu2"):
                with self.assertRaisesRegex(ValueError, "Writer.skip: utterance id .*control byte"):
                    w.skip(bad, "why")
            for why in ("bad\nu2\tforged reason", "a\ttab", "cr\r"):
                with self.assertRaisesRegex(ValueError, "Writer.skip: u1: reason .* holds a TAB or "
                                            "newline"):
                    w.skip("u1", why)
            w.add("spk1", x)
            w.skip("spk2", "fine")
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.ids, ["spk1"])
            self.assertEqual(len(ds.skipped), 1)

    def test_writer_rules(self):
        out = os.path.join(TMP, "rules")
        x = np.ones((4, 3), np.float32)
        with ctxshard.Writer(out, vocab=["a", "b", "c"]) as w:
            w.add("m", x, labels=[0, 1, 2, 1])
            # the order is the caller's mistake: a ValueError, not a bad
            # utterance one could skip
            with self.assertRaisesRegex(ValueError, "b: utterance id comes after "
                                        "'m': ids must arrive in increasing byte order") as cm:
                w.add("b", x, labels=[0, 0, 0, 0])
            self.assertNotIsInstance(cm.exception, ctxshard.RejectedUtterance)
            with self.assertRaisesRegex(ValueError, "duplicate utterance id") as cm:
                w.add("m", x, labels=[0, 0, 0, 0])
            self.assertNotIsInstance(cm.exception, ctxshard.RejectedUtterance)
            with self.assertRaisesRegex(ctxshard.RejectedUtterance, "label 3 is outside the "
                                        r"vocabulary \(0..2\)"):
                w.add("n", x, labels=[0, 3, 0, 0])
            with self.assertRaisesRegex(ctxshard.RejectedUtterance, "5 labels, expected 4"):
                w.add("n", x, labels=[0, 1, 0, 0, 1])
            with self.assertRaisesRegex(ctxshard.RejectedUtterance, "frame 2: unknown symbol 'z'"):
                w.add("n", x, labels=["a", "b", "z", "c"])
            with self.assertRaisesRegex(ctxshard.RejectedUtterance, "dtype int64, expected float"):
                w.add("n", np.ones((4, 3), np.int64), labels=[0] * 4)
            with self.assertRaisesRegex(ctxshard.RejectedUtterance, "3 dimensions, expected 2"):
                w.add("n", np.ones((4, 3, 1), np.float32), labels=[0] * 4)
            with self.assertRaisesRegex(ctxshard.RejectedUtterance, "control byte"):
                w.add("n\x01", x, labels=[0] * 4)
            with self.assertRaisesRegex(TypeError, "labels have dtype float64"):
                w.add("n", x, labels=np.zeros(4))
            self.assertEqual(w.info["num_utterances"], 1)
            w.add("n", x.astype(">f8"), labels=np.array(["c", "c", "b", "a"]))
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.ids, ["m", "n"])
            np.testing.assert_array_equal(ds.labels, [0, 1, 2, 1, 2, 2, 1, 0])
        with ctxshard.Writer(os.path.join(TMP, "rules2")) as w:
            with self.assertRaisesRegex(ValueError, "no vocabulary"):
                w.add("a", x, labels=[0, 0, 0, 0])
            w.add("a", x)

    def test_bad_options(self):
        out = os.path.join(TMP, "opts")
        for kw, err, pat in [({"dtype": "int8"}, ValueError, "not a stored type"),
                             ({"guard": -1}, ValueError, "guard"),
                             ({"guard": 2.0}, TypeError, "guard"),
                             ({"shard_size": "12Q"}, ValueError, "not a size"),
                             ({"shard_size": 100}, ValueError, "below"),
                             ({"compress": "lz4"}, ValueError, "compress"),
                             ({"normalize": "global"}, ValueError, "normalize"),
                             ({"vocab": ["a", "a"]}, ValueError, "appears twice"),
                             ({"on_error": "ignore"}, ValueError, "on_error")]:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(err, pat):
                    ctxshard.Writer(out, **kw)
                self.assertFalse(os.path.exists(out))
        no_leftovers(self, TMP)


class AddMany(unittest.TestCase):
    """Writer.add_many: the bytes of add() called for each utterance, in any
    batches, memory order, byte order and label form; refusals as add()'s,
    skipped or raised by on_error; its own argument checks."""

    def write_one_by_one(self, out, utts, **kw):
        with ctxshard.Writer(out, **kw) as w:
            for i, x, t in utts:
                w.add(i, x, labels=t)

    def write_many(self, out, utts, batch, form=lambda x: x, labels="symbols", **kw):
        index = {s: j for j, s in enumerate(ctxshard.PHONEMES)}
        with ctxshard.Writer(out, **kw) as w:
            for b in range(0, len(utts), batch):
                part = utts[b:b + batch]
                x = form(np.concatenate([u[1] for u in part]))
                lab = None
                if part[0][2] is not None:
                    lab = np.concatenate([u[2][1:-1] for u in part])
                    if labels == "indices":
                        lab = np.array([index[s] for s in lab], np.uint8)
                n = w.add_many([u[0] for u in part], x, [len(u[1]) for u in part], labels=lab)
                self.assertEqual(n, len(part))

    def test_same_bytes_as_add(self):
        utts = raw_utterances(os.path.join(TMP, "raw"))
        for kw in ({"vocab": "phonemes", "shard_size": "200K"},
                   {"vocab": "phonemes", "compress": "zstd", "dtype": "float16"}):
            ref = os.path.join(TMP, "many-ref")
            self.write_one_by_one(ref, utts, **kw)
            for batch, form, labels in ((len(utts), lambda x: x, "symbols"),
                                        (5, lambda x: x.astype(">f4"), "indices"),
                                        (1, np.asfortranarray, "symbols"),
                                        (7, lambda x: x.astype(np.float64), "indices")):
                with self.subTest(kw=kw, batch=batch, labels=labels):
                    out = os.path.join(TMP, "many-out")
                    self.write_many(out, utts, batch, form, labels, **kw)
                    self.assertIsNone(same_dataset(ref, out))
        # features only, ids as bytes
        test = raw_utterances(os.path.join(TMP, "test"))
        ref, out = os.path.join(TMP, "many-ref-f"), os.path.join(TMP, "many-out-f")
        self.write_one_by_one(ref, test)
        with ctxshard.Writer(out) as w:
            self.assertEqual(w.add_many([i.encode() for i, _, _ in test],
                                        np.concatenate([x for _, x, _ in test]),
                                        np.array([len(x) for _, x, _ in test], np.uint32)),
                             len(test))
            self.assertEqual(w.add_many([], np.zeros((0, 28), np.float32), []), 0)
        self.assertIsNone(same_dataset(ref, out))

    def test_refusals(self):
        x = np.ones((5 * 4, 3), np.float32)
        x[8, 1] = np.nan  # in u2
        ids, lens = [f"u{n}" for n in range(5)], [4] * 5
        out = os.path.join(TMP, "many-skip")
        w = ctxshard.Writer(out, on_error="skip")
        self.assertEqual(w.add_many(ids, x, lens), 4)
        self.assertEqual([i for i, _ in w.skipped], ["u2"])
        self.assertIn("NaN", w.skipped[0][1])
        with self.assertWarns(UserWarning):
            w.commit()
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.ids, ["u0", "u1", "u3", "u4"])
        with self.assertRaises(ctxshard.RejectedUtterance) as e:
            with ctxshard.Writer(out + "2") as w:
                w.add_many(ids, x, lens)
        self.assertEqual(e.exception.id, "u2")
        self.assertFalse(os.path.exists(out + "2"))
        # an unknown symbol: named like add() names it, skipped like add() skips it
        lab = np.array(["AA"] * 20, dtype="<U5")
        lab[13] = "QQ"  # u3, frame 1
        w = ctxshard.Writer(out + "3", vocab="phonemes", on_error="skip")
        self.assertEqual(w.add_many(ids, np.ones((20, 3), np.float32), lens, labels=lab), 4)
        self.assertEqual(w.skipped, [("u3", "frame 1: unknown symbol 'QQ'")])
        with self.assertWarns(UserWarning):
            w.commit()
        # an id out of order is an error whatever on_error says
        w = ctxshard.Writer(out + "4", on_error="skip")
        with self.assertRaisesRegex(ValueError, "u0: utterance id comes after 'u1'"):
            w.add_many(["u1", "u0"], np.ones((8, 3), np.float32), [4, 4])
        self.assertEqual(w.info["num_utterances"], 1)
        w.abort()

    def test_arguments(self):
        x = np.ones((8, 3), np.float32)
        with ctxshard.Writer(os.path.join(TMP, "many-args"), vocab="phonemes") as w:
            for ids, xx, lens, lab, msg in (
                    (["a", "b"], x, [4], None, "lengths must be 2 integers"),
                    (["a", "b"], x, [4, 5], None, "lengths add up to 9 frames, x has 8"),
                    (["a", "b"], x, [4.0, 4.0], None, "lengths must be 2 integers"),
                    (["a", "b"], x.ravel(), [4, 4], None, "expected \\[frames, dim\\]"),
                    (["a", "b\0c"], x, [4, 4], None, "holds a NUL byte"),
                    (["a", "b"], x, [4, 4], np.zeros(7, int), "labels must be one per frame")):
                with self.assertRaisesRegex(ValueError, msg):
                    w.add_many(ids, xx, lens, labels=lab)
            with self.assertRaisesRegex(TypeError, "^Writer.add_many: labels have dtype float64"):
                w.add_many(["a"], x, [8], labels=np.zeros(8))
            self.assertEqual(w.info["num_utterances"], 0)
            w.add_many(["a"], x, [8], labels=np.zeros(8, int))
        with ctxshard.Writer(os.path.join(TMP, "many-args2")) as w:
            with self.assertRaisesRegex(ValueError, "no vocabulary"):
                w.add_many(["a"], x, [8], labels=np.zeros(8, int))
            w.add("a", x)
        w = ctxshard.Writer(os.path.join(TMP, "many-args3"), vocab="phonemes",
                           transcripts="sequence")
        with self.assertRaisesRegex(ValueError, "add\\(seq=\\)"):
            w.add_many(["a"], x, [8])
        w.abort()


class Atomic(unittest.TestCase):
    def test_abort_and_exceptions_leave_nothing(self):
        d = tempfile.mkdtemp(dir=TMP)
        out = os.path.join(d, "out")
        x = np.ones((50, 4), np.float32)
        w = ctxshard.Writer(out, shard_size="16K")
        for n in range(20):
            w.add(f"u{n:03d}", x)
        self.assertGreater(w.info["num_shards"], 1)
        w.abort()
        self.assertEqual(os.listdir(d), [])
        with self.assertRaisesRegex(ValueError, "closed"):
            w.add("v", x)
        with self.assertRaises(KeyError):
            with ctxshard.Writer(out) as w:
                w.add("a", x)
                raise KeyError("boom")
        self.assertEqual(os.listdir(d), [])
        # a previous dataset survives a failed replacement
        with ctxshard.Writer(out) as w:
            w.add("a", x)
        before = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
        with self.assertRaises(RuntimeError):
            with ctxshard.Writer(out) as w:
                w.add("b", x * 2)
                raise RuntimeError
        self.assertEqual({f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)},
                         before)
        self.assertEqual(sorted(os.listdir(d)), ["out"])
        # a writer dropped without commit leaves nothing either
        w = ctxshard.Writer(os.path.join(d, "dropped"))
        w.add("a", x)
        del w
        self.assertEqual(sorted(os.listdir(d)), ["out"])
        # an empty dataset is refused at commit, and leaves nothing
        with self.assertRaisesRegex(ValueError, "no utterance added"):
            with ctxshard.Writer(os.path.join(d, "empty")):
                pass
        self.assertEqual(sorted(os.listdir(d)), ["out"])
        # something that is not a dataset is never replaced
        os.mkdir(os.path.join(d, "mine"))
        open(os.path.join(d, "mine", "notes.txt"), "w").close()
        with self.assertRaisesRegex(OSError, "not a ctxshard dataset"):
            ctxshard.Writer(os.path.join(d, "mine"))

    def test_out_replaced_before_commit(self):
        """OUT is what it is at commit: a Writer begun over a dataset whose
        OUT someone replaced by a directory of their own meanwhile leaves
        that directory alone, names it, and writes nothing."""
        d = tempfile.mkdtemp(dir=TMP)
        out = os.path.join(d, "out")
        x = np.ones((5, 3), np.float32)
        with ctxshard.Writer(out) as w:
            w.add("a", x)
        w = ctxshard.Writer(out)
        w.add("b", x * 2)
        os.rename(out, os.path.join(d, "moved"))
        os.mkdir(out)
        with open(os.path.join(out, "precious.txt"), "w") as f:
            f.write("keep me")
        with self.assertRaisesRegex(FileExistsError, f"{out}: exists and is not a ctxshard dataset "
                                    r"\(no manifest.cxs\).*left alone, nothing written"):
            w.commit()
        self.assertEqual(os.listdir(out), ["precious.txt"])
        self.assertEqual(open(os.path.join(out, "precious.txt")).read(), "keep me")
        self.assertEqual(sorted(os.listdir(d)), ["moved", "out"])  # no temporary left
        # an OUT that went away meanwhile is written as usual
        shutil.rmtree(out)
        os.rename(os.path.join(d, "moved"), out)
        with ctxshard.Writer(out) as w:
            w.add("c", x)
            os.rename(out, os.path.join(d, "moved"))
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.ids, ["c"])

    def test_kill_during_commit(self):
        """kill -9 at each phase of a Writer's commit: OUT is absent, or the
        previous dataset, intact; the next writer removes the leftovers."""
        d = tempfile.mkdtemp(dir=TMP)
        out = os.path.join(d, "out")
        script = textwrap.dedent(f"""
            import sys; sys.path.insert(0, {os.path.join(SRC, 'python')!r})
            import numpy as np, ctxshard
            with ctxshard.Writer({out!r}, shard_size="16K", vocab=["a", "b"]) as w:
                for n in range(12):
                    w.add(f"u{{n:03d}}", np.full((60, 4), float(sys.argv[1]), np.float32),
                          labels=[n % 2] * 60)
        """)
        env = dict(os.environ)
        if not HOOKS:
            # what users install: the variable changes nothing, the
            # Writer commits and the process lives
            r = subprocess.run([sys.executable, "-c", script, "2"],
                               env=dict(env, CXS_PACK_FAULT="kill:rename:0"))
            self.assertEqual(r.returncode, 0)
            with ctxshard.open(out) as ds:
                self.assertEqual(ds.num_utterances, 12)
            self.skipTest("built without the test hooks (-Dtest_hooks=true): no kill injected")
        for previous in (False, True):
            if previous:
                subprocess.run([sys.executable, "-c", script, "1"], check=True, env=env)
                ref = {f: open(os.path.join(out, f), "rb").read() for f in os.listdir(out)}
            for phase in ("shard-end", "manifest", "rename"):
                with self.subTest(previous=previous, phase=phase):
                    r = subprocess.run([sys.executable, "-c", script, "2"],
                                       env=dict(env, CXS_PACK_FAULT=f"kill:{phase}:0"))
                    self.assertEqual(r.returncode, -signal.SIGKILL)
                    if previous:
                        self.assertEqual({f: open(os.path.join(out, f), "rb").read()
                                          for f in os.listdir(out)}, ref)
                    else:
                        self.assertFalse(os.path.exists(out))
                        self.assertNotEqual(run("info", out, check=False).returncode, 0)
        self.assertTrue(any(".tmp-" in n for n in os.listdir(d)))  # killed writers' leftovers
        subprocess.run([sys.executable, "-c", script, "3"], check=True, env=env)
        self.assertEqual(sorted(os.listdir(d)), ["out"])
        with ctxshard.open(out) as ds:
            self.assertEqual(ds.num_utterances, 12)
            self.assertEqual(float(ds.window(0, 0)[0, 0]), 3.0)


class Pack(unittest.TestCase):
    def test_progress_and_failures(self):
        seen = []
        out = os.path.join(TMP, "pack-progress")
        info = ctxshard.pack(os.path.join(TMP, "raw"), out,
                             progress=lambda done, total: seen.append((done, total)))
        self.assertEqual(seen[-1], (24, 24))
        self.assertEqual([d for d, _ in seen], list(range(1, 25)))
        self.assertEqual(info["num_utterances"], 24)
        raw = os.path.join(TMP, "packbad")
        shutil.copytree(os.path.join(TMP, "raw"), raw)
        victim = sorted(glob.glob(os.path.join(raw, "mfcc", "*.npy")))[3]
        x = np.load(victim)
        x[1, 1] = np.nan
        np.save(victim, x)
        with self.assertRaisesRegex(ValueError, "NaN at frame 1, dimension 1 .*nothing written"):
            ctxshard.pack(raw, os.path.join(TMP, "pack-bad"))
        self.assertFalse(os.path.exists(os.path.join(TMP, "pack-bad")))
        ctxshard.pack(raw, os.path.join(TMP, "pack-skip"), on_error="skip")
        run("pack", raw, os.path.join(TMP, "pack-skip-cli"), "--on-error", "skip", "--quiet")
        self.assertIsNone(same_dataset(os.path.join(TMP, "pack-skip"),
                                       os.path.join(TMP, "pack-skip-cli")))
        os.remove(victim.replace("mfcc", "transcript"))
        with self.assertRaisesRegex(ValueError, "features without a transcript"):
            ctxshard.pack(raw, os.path.join(TMP, "pack-bad"))
        with self.assertRaisesRegex(FileNotFoundError, "no mfcc/ directory"):
            ctxshard.pack(TMP, os.path.join(TMP, "pack-bad"))
        no_leftovers(self, TMP)


class PackIsTheLibrarys(unittest.TestCase):
    """ctxshard.pack and ctxshard.check are cxs_import_npy, the code behind
    `ctxshard pack` and `ctxshard check`: the same problems, parts, symbols
    and bytes."""

    def test_check_lists_what_the_command_lists(self):
        raw = os.path.join(TMP, "checkme")
        shutil.copytree(os.path.join(TMP, "raw"), raw)
        mf = sorted(glob.glob(os.path.join(raw, "mfcc", "*.npy")))
        x = np.load(mf[2])
        x[0, 3] = np.inf
        np.save(mf[2], x)
        os.remove(mf[5].replace("mfcc", "transcript"))
        got = ctxshard.check(raw, threads=2)
        self.assertEqual(got["listed"], 24)
        self.assertEqual(got["valid"], 22)
        self.assertTrue(got["labels"])
        ids = [os.path.basename(m)[:-4] for m in mf]
        self.assertEqual([p["id"] for p in got["problems"]], [ids[2], ids[5]])
        self.assertIn("infinity at frame 0, dimension 3", got["problems"][0]["reason"])
        self.assertEqual(got["problems"][0]["file"], mf[2])
        self.assertIn("features without a transcript", got["problems"][1]["reason"])
        self.assertFalse(any(p["system"] for p in got["problems"]))
        r = run("check", raw, check=False)
        self.assertEqual(r.returncode, 1)
        for p in got["problems"]:
            self.assertIn(p["reason"].split("; ")[0], r.stderr)
        self.assertIn(f"{got['frames']} frames, dim {got['dim']}", r.stdout)
        with self.assertRaisesRegex(FileNotFoundError, "check: .*no such directory"):
            ctxshard.check(os.path.join(TMP, "nothing-here"))
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            done = ctxshard.pack(raw, os.path.join(TMP, "checkme-skip"), on_error="skip",
                                 threads=512)  # readers beyond the writer's 256 threads
        self.assertEqual([i for i, _ in done["skipped"]], [ids[2], ids[5]])
        self.assertIn("infinity at frame 0", done["skipped"][0][1])
        self.assertEqual(done["num_skipped"], 2)
        self.assertTrue(any("2 utterances skipped, 22 written" in str(m.message) for m in w))
        with self.assertRaises(FileNotFoundError):
            ctxshard.pack(raw, os.path.join(TMP, "checkme-bad"), vocab="/nonexistent/phones")
        empty = os.path.join(TMP, "checkme-empty")
        os.makedirs(os.path.join(empty, "mfcc"))
        with self.assertRaisesRegex(ValueError, "no .npy files"):
            ctxshard.pack(empty, os.path.join(TMP, "checkme-bad"))
        self.assertFalse(os.path.exists(os.path.join(TMP, "checkme-bad")))

    def test_ctrl_c_is_a_keyboard_interrupt(self):
        """SIGINT while the library packs: KeyboardInterrupt after the run
        stops, nothing written (the callbacks cannot raise through C)."""
        import threading
        out = os.path.join(TMP, "interrupted")
        timer = []

        def tick(done, total):  # the signal arrives while C compresses (zstd:19, one thread)
            if done == 1:
                timer.append(threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)))
                timer[0].start()
        with self.assertRaises(KeyboardInterrupt):
            ctxshard.pack(os.path.join(TMP, "raw"), out, progress=tick, threads=1,
                          compress="zstd:19")
        timer[0].join()
        self.assertFalse(os.path.exists(out))
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)
        # and from inside a callback
        def kill(done, total):
            if done == 3:
                os.kill(os.getpid(), signal.SIGINT)
        with self.assertRaises(KeyboardInterrupt):
            ctxshard.pack(os.path.join(TMP, "raw"), out, progress=kill, threads=1)
        self.assertFalse(os.path.exists(out))
        # an argument refused before the call leaves SIGINT as it was
        with self.assertRaises(TypeError):
            ctxshard.pack(os.path.join(TMP, "raw"), out, sos=3)
        self.assertIs(signal.getsignal(signal.SIGINT), signal.default_int_handler)

    def test_parts_merge_into_the_whole(self):
        src = os.path.join(TMP, "raw")
        whole = os.path.join(TMP, "parts-whole")
        run("pack", src, whole, "--quiet", "--shard-size", "100K")
        parts = []
        for i in (1, 2, 3):
            parts.append(os.path.join(TMP, f"parts-{i}"))
            info = ctxshard.pack(src, parts[-1], shard_size="100K", part=f"{i}/3")
            self.assertEqual(info["listed"], 24)
        merged = os.path.join(TMP, "parts-merged")
        run("merge", *parts, merged, "--quiet")
        self.assertIsNone(same_dataset(whole, merged))
        with self.assertRaisesRegex(ValueError, "part='4/3'"):
            ctxshard.pack(src, os.path.join(TMP, "parts-bad"), part="4/3")

    def test_symbols_and_markers(self):
        src = os.path.join(TMP, "raw")
        ref = os.path.join(TMP, "sym-ref")
        run("pack", src, ref, "--quiet")
        via_list = os.path.join(TMP, "sym-list")
        ctxshard.pack(src, via_list, vocab=list(ctxshard.PHONEMES))
        self.assertIsNone(same_dataset(ref, via_list))
        vf = os.path.join(TMP, "phones.txt")
        with open(vf, "w") as f:
            f.write("\n".join(ctxshard.PHONEMES) + "\n")
        via_file = os.path.join(TMP, "sym-file")
        ctxshard.pack(src, via_file, vocab=vf)
        self.assertIsNone(same_dataset(ref, via_file))
        with self.assertRaisesRegex(ValueError, "the start and end symbols must differ"):
            ctxshard.pack(src, os.path.join(TMP, "sym-bad"), sos="AA", eos="AA")
        with self.assertRaisesRegex(ctxshard.RejectedUtterance, "expected <s>"):
            ctxshard.pack(src, os.path.join(TMP, "sym-bad"), sos="<s>")
        self.assertFalse(os.path.exists(os.path.join(TMP, "sym-bad")))
        # the one phoneme list: the library's, in Python and in the command
        with ctxshard.open(ref) as ds:
            self.assertEqual(tuple(ds.vocab), ctxshard.PHONEMES)
        self.assertEqual(len(ctxshard.PHONEMES), 42)


class FromAudio(unittest.TestCase):
    def test_example(self):
        try:
            import torchaudio  # noqa: F401
        except ImportError:
            self.skipTest("torchaudio is not installed (Debian: python3-torchaudio)")
        d = tempfile.mkdtemp(dir=TMP)
        ex = os.path.join(SRC, "examples", "from_audio.py")
        r = subprocess.run([sys.executable, ex, "--demo", os.path.join(d, "wav"),
                            os.path.join(d, "out")], capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(SRC, "python")))
        self.assertEqual(r.returncode, 0, r.stderr + r.stdout)
        self.assertIn("served", r.stdout)
        with ctxshard.open(os.path.join(d, "out")) as ds:
            self.assertEqual(ds.dim, 28)
            self.assertGreater(ds.num_utterances, 1)
            self.assertEqual(ds.num_classes, len(ctxshard.PHONEMES))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
