"""`ctxshard import kaldi`: text-form matrices (ark,t), scp entries with
Kaldi's row and column ranges (`utt a.ark:123[0:99]`, `[0:99,0:12]`),
and the reader threads.  The archives, the text and the expected values
come from the test's own writer (tests/python/kaldi_ref.py: the binary
objects, Kaldi's text form, and each text token rounded once to float32
with exact fractions), never from the importer's code.  The stored values
equal the expected ones exactly, the datasets are byte-identical to the
same matrices written through ctxshard.Writer, and the bytes (and the
messages) are the same whatever --threads says.

usage: /usr/bin/python3 tests/python/kaldi_forms_test.py BUILD_DIR SOURCE_ROOT"""
import os
import shutil
import sys
import tempfile
import unittest

from testenv import from_build, run, same_dataset

BUILD, SRC, EXE = from_build()

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402
import kaldi_ref as K  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-kforms-")
F = np.float32


def stored(path):
    with ctxshard.open(path) as ds:
        return {uid: np.array(x, dtype=F) for uid, x, _ in
                (ds.utterance(u) for u in range(len(ds.ids)))}


def features(rng, R, C):
    return (rng.standard_normal((R, C)) * 3 + rng.uniform(-2, 2, C)).astype(F)


def written(d, items):
    """The dataset ctxshard.Writer makes of {id: matrix}."""
    out = os.path.join(d, "by-writer")
    with ctxshard.Writer(out) as w:
        for k in sorted(items):
            w.add(k, items[k])
    return out


def text_ark(path, items):
    """items: [(key, text bytes)], a text archive as `copy-feats ark,t`
    writes it (`key` then the object, which begins with a space).
    Returns {key: offset of the object}."""
    offs = {}
    with open(path, "wb") as f:
        for key, obj in items:
            f.write(key.encode())
            offs[key] = f.tell()
            f.write(obj)
    return offs


class TextForm(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp(dir=TMP)
        self.out = os.path.join(self.d, "out")

    def imports(self, src, *args):
        r = run("import", "kaldi", src, self.out, *args)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def fails(self, src, *want):
        r = run("import", "kaldi", src, self.out)
        self.assertEqual(r.returncode, 1, r.stderr + r.stdout)
        for w in want:
            self.assertIn(w, r.stderr)
        self.assertFalse(os.path.exists(self.out))

    def test_read_exactly(self):
        """Kaldi's text form at its default six digits, at nine (exact for
        float32) and as integers: every value is the token rounded once to
        float32; the dataset is the Writer's of the same matrices."""
        rng = np.random.default_rng(3)
        items, want = [], {}
        shapes = [(1, 5), (2, 5), (3, 5), (17, 5), (9, 5)]
        fmts = ["{:g}", "{:.9g}", "{:.0f}", "{:g}", "{:.3e}"]
        for i, ((R, C), fmt) in enumerate(zip(shapes, fmts)):
            m = features(rng, R, C)
            if i == 3:
                m[0, 0], m[1, 1] = 1e-30, -3.4e38  # tiny, near the float range's end
            obj, back = K.encode_text(m, fmt)
            items.append((f"t{i}", obj))
            want[f"t{i}"] = back
        ark = os.path.join(self.d, "t.ark")
        offs = text_ark(ark, items)
        r = self.imports(ark)
        self.assertIn("(text)", r.stdout)
        got = stored(self.out)
        self.assertEqual(sorted(got), sorted(want))
        for k in want:
            self.assertTrue(np.array_equal(got[k].view(np.uint32), want[k].view(np.uint32)), k)
        self.assertIsNone(same_dataset(self.out, written(self.d, want)))
        # through an scp naming the objects' offsets, as ark,scp,t writes it
        scp = os.path.join(self.d, "t.scp")
        K.write_scp(scp, [(k, ark, offs[k]) for k, _ in items])
        whole = self.out + "-scp"
        r = run("import", "kaldi", scp, whole)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(same_dataset(self.out, whole))
        # the Python binding says which kinds it met
        info = ctxshard.import_kaldi(ark, self.out + "-py")
        self.assertEqual(info["kinds"], ["text"])

    def test_mixed_with_binary_and_line_ends(self):
        """Text and binary objects in one archive; CRLF line ends, ';'
        between rows, a file without the binary marker recognised by its
        bytes (no .ark ending)."""
        rng = np.random.default_rng(5)
        a, b, c = features(rng, 4, 3), features(rng, 6, 3), features(rng, 2, 3)
        ta, wa = K.encode_text(a, "{:.9g}", eol="\r\n")
        cobj = K.encode(c, "CM")
        tb = b" [ " + b" ; ".join(" ".join(f"{x:.9g}" for x in row).encode() for row in b) + b" ]\n"
        wb = np.array([[K.text_float(f"{x:.9g}") for x in row] for row in b], F)
        ark = os.path.join(self.d, "mixed")
        with open(ark, "wb") as f:
            f.write(b"a" + ta + b"b" + tb + b"c " + cobj)
        self.imports(ark)
        got = stored(self.out)
        self.assertTrue(np.array_equal(got["a"], wa))
        self.assertTrue(np.array_equal(got["b"], wb))
        self.assertTrue(np.array_equal(got["c"], K.decode(cobj)[1]))

    def test_refusals(self):
        cases = [
            (b"u [1 2 ]\n", "expected '[' followed by white space, found '[1'"),
            (b"u [ ]\n", "an empty text (0x0)"),
            (b"u []\n", "an empty text (0x0)"),
            (b"u [\n 1 2\n 3 ]\n", "row 2 has 1 values, row 1 has 2"),
            (b"u [ 1 x 2 ]\n", "expected a number at byte 4, found 'x'"),
            (b"u [ 1 +2 ]\n", "found '+2'"),
            (b"u [ 1 1e99 ]\n", "'1e99' at byte 4 is not a number a float holds"),
            (b"u [ 1 2\n 3 4\n", "text-form matrix without its ']'", "truncated archive"),
        ]
        for data, *want in cases:
            ark = os.path.join(self.d, "bad.ark")
            with open(ark, "wb") as f:
                f.write(data)
            with self.subTest(data=data):
                self.fails(ark, "utterance u", *want)
        # NaN and infinity are read as Kaldi reads them, then refused by
        # the writer's rule, naming the place
        with open(ark, "wb") as f:
            f.write(b"u [ 1 2 \n 3 nan ]\n")
        self.fails(ark, "NaN at frame 1, dimension 1")
        with open(ark, "wb") as f:
            f.write(b"u [ 1 2 \n 3 INF ]\n")
        self.fails(ark, "infinity at frame 1, dimension 1")


class Ranges(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        rng = np.random.default_rng(11)
        cls.d = tempfile.mkdtemp(dir=TMP)
        cls.kinds = ["CM", "FM", "CM2", "CM3", "DM"]
        cls.items = [(f"r{i}", K.encode(features(rng, 12, 6), k)) for i, k in enumerate(cls.kinds)]
        txt, cls.txt_want = K.encode_text(features(rng, 12, 6), "{:.9g}")
        cls.ark = os.path.join(cls.d, "r.ark")
        cls.offs = K.write_ark(cls.ark, cls.items)
        cls.tark = os.path.join(cls.d, "t.ark")
        cls.toff = text_ark(cls.tark, [("rt", txt)])["rt"]
        cls.full = {k: K.decode(o)[1] for k, o in cls.items}
        cls.full["rt"] = cls.txt_want

    def entry(self, key, rng_spec):
        if key == "rt":
            return f"{self.tark}:{self.toff}[{rng_spec}]"
        return f"{self.ark}:{self.offs[key]}[{rng_spec}]"

    # (range, rows, columns): Python slices of the whole decoding
    SPECS = [("0:11", slice(0, 12), slice(0, 6)), ("2:5", slice(2, 6), slice(0, 6)),
             ("3:7,1:4", slice(3, 8), slice(1, 5)), (":,2:3", slice(0, 12), slice(2, 4)),
             ("4:4,0:0", slice(4, 5), slice(0, 1)), ("5:9,:", slice(5, 10), slice(0, 6))]

    def test_ranges_read_exactly(self):
        """Every kind (and a text matrix) under row and column ranges: the
        stored values are the block of the whole decoding (Kaldi decodes a
        range with the same expressions), the dataset the Writer's."""
        lines, want = [], {}
        for key in [k for k, _ in self.items] + ["rt"]:
            for j, (spec, rs, cs) in enumerate(self.SPECS):
                uid = f"{key}-{j}"
                lines.append(f"{uid} {self.entry(key, spec)}\n")
                want[uid] = np.ascontiguousarray(self.full[key][rs, cs])
        # every utterance is 6 columns wide or the writer refuses the width:
        # one dataset per width
        by_width = {}
        for uid, m in want.items():
            by_width.setdefault(m.shape[1], {})[uid] = m
        for C, sub in by_width.items():
            d = tempfile.mkdtemp(dir=self.d)
            scp, out = os.path.join(d, "s.scp"), os.path.join(d, "out")
            with open(scp, "w") as f:
                f.writelines(ln for ln in lines if ln.split()[0] in sub)
            r = run("import", "kaldi", scp, out)
            self.assertEqual(r.returncode, 0, r.stderr)
            got = stored(out)
            self.assertEqual(sorted(got), sorted(sub))
            for uid, m in sub.items():
                # DM is stored as float32: the writer rounds the doubles
                self.assertTrue(np.array_equal(got[uid], m.astype(F)), f"{uid} ({C} columns)")
            self.assertIsNone(same_dataset(out, written(d, sub)), f"{C} columns")

    def test_range_past_the_end_is_cut_as_kaldi_does(self):
        """A row range may end before rows + 3 (Kaldi's tolerance for
        rounded segment times): cut at the last row, with a note."""
        scp, out = os.path.join(self.d, "cut.scp"), os.path.join(self.d, "cut")
        with open(scp, "w") as f:
            f.write(f"a {self.entry('r0', '8:14')}\n")
        r = run("import", "kaldi", scp, out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("a: rows 8:14 end past the matrix's 12 rows: cut there", r.stderr)
        self.assertTrue(np.array_equal(stored(out)["a"], self.full["r0"][8:12]))

    def test_refusals(self):
        bad = [("0:15", "range [0:15] is outside the 12x6 matrix"),
               ("12:13", "range [12:13] is outside the 12x6 matrix"),
               ("0:5,0:6", "range [0:5,0:6] is outside the 12x6 matrix"),
               ("5:3", "not a Kaldi range"), ("a:b", "not a Kaldi range"),
               ("0:5,", "not a Kaldi range"), ("1:2:3", "not a Kaldi range"),
               ("", "not a Kaldi range"), ("-1:3", "not a Kaldi range"),
               ("0:3][1:2", "not a Kaldi range")]
        for spec, want in bad:
            scp, out = os.path.join(self.d, "bad.scp"), os.path.join(self.d, "bad")
            with open(scp, "w") as f:
                f.write(f"u {self.entry('r1', spec)}\n")
            with self.subTest(spec=spec):
                r = run("import", "kaldi", scp, out)
                self.assertEqual(r.returncode, 1, r.stderr + r.stdout)
                self.assertIn("bad.scp line 1: u", r.stderr)
                self.assertIn(want, r.stderr)
                self.assertFalse(os.path.exists(out))

    def test_segments_of_one_recording_in_parts(self):
        """Segments cut from one matrix (several entries, one object), a
        bare path without an offset, and a split import: the parts merge
        into the bytes of the whole."""
        d = tempfile.mkdtemp(dir=self.d)
        one = os.path.join(d, "one.ark")
        rng = np.random.default_rng(2)
        obj = K.encode(features(rng, 4000, 20), "CM")
        with open(one, "wb") as f:
            f.write(obj)  # a bare object: `path[range]` with no offset
        full = K.decode(obj)[1]
        scp = os.path.join(d, "seg.scp")
        segs = [(f"s{i:02d}", 250 * i, 250 * i + 299) for i in range(15)]
        with open(scp, "w") as f:
            f.writelines(f"{k} {one}[{a}:{b}]\n" for k, a, b in segs)
        whole = os.path.join(d, "whole")
        r = run("import", "kaldi", scp, whole, "--shard-size", "16K")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = stored(whole)
        for k, a, b in segs:
            self.assertTrue(np.array_equal(got[k], full[a:b + 1]), k)
        parts = []
        for i in (1, 2, 3):
            p = os.path.join(d, f"p{i}")
            r = run("import", "kaldi", scp, p, "--shard-size", "16K", "--part", f"{i}/3")
            self.assertEqual(r.returncode, 0, r.stderr)
            parts.append(p)
        merged = os.path.join(d, "merged")
        r = run("merge", *parts, merged)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNone(same_dataset(whole, merged))


class Threads(unittest.TestCase):
    def test_same_bytes_and_messages_for_any_thread_count(self):
        """Every kind, text, ranges, labels, an unsorted scp and bad
        utterances skipped: the dataset and everything said on stderr are
        the same for 1, 2, 3 and 8 reader threads, from the command and
        from Python."""
        d = tempfile.mkdtemp(dir=TMP)
        rng = np.random.default_rng(8)
        kinds = ["CM", "FM", "CM2", "CM3", "DM", "CM", "CM", "FM"]
        items = [(f"k{i:03d}", K.encode(features(rng, 5 + 7 * i, 4), kinds[i % len(kinds)]))
                 for i in range(60)]
        ark = os.path.join(d, "a.ark")
        offs = K.write_ark(ark, items)
        txt, _ = K.encode_text(features(rng, 9, 4))
        tark = os.path.join(d, "t.ark")
        toff = text_ark(tark, [("x", txt)])["x"]
        lines = []
        for k, obj in items:
            T = 5 + 7 * int(k[1:])
            if k.endswith("7"):
                lines.append(f"{k} {ark}:{offs[k] + 1}\n")  # a wrong offset: skipped
            elif k.endswith("3"):
                lines.append(f"{k} {ark}:{offs[k]}[1:{T - 2}]\n")
            else:
                lines.append(f"{k} {ark}:{offs[k]}\n")
        lines.append(f"t000 {tark}:{toff}\n")
        lines.reverse()  # unsorted: sorted, and said so
        scp = os.path.join(d, "a.scp")
        with open(scp, "w") as f:
            f.writelines(lines)
        frames = {ln.split()[0]: None for ln in lines}
        ali = os.path.join(d, "ali.txt")
        with open(ali, "w") as f:
            for k in sorted(frames):
                if k == "t000":
                    T = 9
                else:
                    T = 5 + 7 * int(k[1:])
                    T = T - 2 if k.endswith("3") else T
                f.write(k + " " + " ".join(str((t * 3) % 7) for t in range(T)) + "\n")
        first = None
        for n in (1, 2, 3, 8):
            out = os.path.join(d, f"t{n}")
            r = run("import", "kaldi", scp, out, "--ali", ali, "--on-error", "skip",
                    "--threads", n, "--shard-size", "64K", "--vocab-from-data")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("skipped: ", r.stderr)
            self.assertIn("not in byte order: sorted", r.stderr)
            if first is None:
                first = (out, r.stderr.replace(out, "OUT"), r.stdout.split(" in ")[0])
                with ctxshard.open(out) as ds:
                    self.assertEqual(len(ds.ids), 61 - 6)
                self.assertTrue(os.path.exists(os.path.join(out, "shard-000002.cxs")))
            else:
                self.assertIsNone(same_dataset(first[0], out), f"--threads {n}")
                self.assertEqual(r.stderr.replace(out, "OUT"), first[1], f"--threads {n}")
        for n in (1, 4):
            out = os.path.join(d, f"py{n}")
            notes = []
            ctxshard.import_kaldi(scp, out, ali=ali, on_error="skip", threads=n,
                                  vocab_from_data=True, shard_size="64K", notes=notes.append)
            self.assertIsNone(same_dataset(first[0], out), f"threads={n}")
            self.assertEqual(len([m for m in notes if m.startswith("skipped: ")]), 6)

    def test_half_types_converted_on_the_reader_threads(self):
        """float16 and bfloat16 (converted on the reader threads): the bytes
        of ctxshard.Writer with the same dtype for any thread count, float32
        and float64 objects, subnormals and values near the overflow; a
        value that overflows float16 is refused with the writer's message,
        the same for every count."""
        d = tempfile.mkdtemp(dir=TMP)
        rng = np.random.default_rng(4)
        mats = {}
        for i in range(24):
            m = features(rng, 3 + 5 * i, 7)
            m[0, :4] = [65504.0, 65519.0, -6e-8, 3e-5]  # the largest, a tie below overflow, subnormals
            mats[f"h{i:02d}"] = m.astype(np.float64) if i % 5 == 0 else m
        items = [(k, K.encode(m, "DM" if m.dtype == np.float64 else "FM")) for k, m in mats.items()]
        ark = os.path.join(d, "h.ark")
        K.write_ark(ark, items)
        for dtype, flag in (("float16", "f16"), ("bfloat16", "bf16")):
            ref = os.path.join(d, f"w-{flag}")
            with ctxshard.Writer(ref, dtype=dtype) as w:
                for k in sorted(mats):
                    w.add(k, mats[k])
            for n in (1, 3):
                out = os.path.join(d, f"{flag}-{n}")
                r = run("import", "kaldi", ark, out, "--dtype", flag, "--threads", n)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertIsNone(same_dataset(ref, out), f"{dtype} --threads {n}")
        bad = dict(mats)
        bad["h05"] = bad["h05"].copy()
        bad["h05"][2, 3] = 65520.0  # rounds to infinity in float16
        K.write_ark(ark, [(k, K.encode(m, "DM" if m.dtype == np.float64 else "FM"))
                          for k, m in bad.items()])
        errs = set()
        for n in (1, 3):
            r = run("import", "kaldi", ark, os.path.join(d, "bad"), "--dtype", "f16", "--threads", n)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn("utterance h05: value 65520 at frame 2, dimension 3 overflows float16",
                          r.stderr)
            errs.add(r.stderr)
        self.assertEqual(len(errs), 1)


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
