"""The seams of a Kaldi import, through `ctxshard import kaldi` and
ctxshard.import_kaldi alike:

- a second split is numbered like the first: labels without --vocab (or
  --vocab-from-data) are refused naming --vocab and `ctxshard vocab`;
  `ctxshard vocab DATASET` (ctxshard.write_vocab) prints the vocabulary
  in a form --vocab takes, and a dev split imported with it gets the
  train split's numbering although it lacks some of its symbols; Kaldi's
  phones.txt is taken, a table whose ids leave a gap is refused naming
  the missing id; pack's documented default (the standard phoneme list)
  is the same for every split;
- Kaldi's rspecifiers and wspecifiers (ark,t: ark,s,cs: scp,s,cs: ark,o:
  ark,scp:A,S ...) are read as Kaldi classifies them (s checked, p
  refused, unknown or empty options refused naming them), a pipe and
  standard input get the refusal that says to write a file first, and a
  Kaldi data directory gets a message naming its feats.scp and text.

usage: /usr/bin/python3 tests/python/kaldi_seams_test.py BUILD_DIR SOURCE_ROOT"""
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

TMP = tempfile.mkdtemp(prefix="ctxshard-kseams-")


def write_lines(path, lines):
    with open(path, "w") as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def split(d, name, ids, rng):
    """A Kaldi data directory d/name: an archive, its feats.scp (sorted)
    and an unsorted copy of each; {id: frames}."""
    os.makedirs(os.path.join(d, name))
    items = [(k, K.encode(rng.standard_normal((4 + i % 5, 3)).astype(np.float32), "FM"))
             for i, k in enumerate(ids)]
    base = os.path.join(d, name)
    offs = K.write_ark(os.path.join(base, "feats.ark"), items)
    write_lines(os.path.join(base, "feats.scp"),
                [f"{k} {os.path.join(base, 'feats.ark')}:{offs[k]}" for k, _ in items])
    rev = list(reversed(items))
    offs = K.write_ark(os.path.join(base, "unsorted.ark"), rev)
    write_lines(os.path.join(base, "unsorted.scp"),
                [f"{k} {os.path.join(base, 'unsorted.ark')}:{offs[k]}" for k, _ in rev])
    return {k: len(K.decode(o)[1]) for k, o in items}


class Vocabulary(unittest.TestCase):
    """Train has symbols dev lacks: dev must be numbered like train."""

    @classmethod
    def setUpClass(cls):
        cls.d = tempfile.mkdtemp(dir=TMP)
        rng = np.random.default_rng(3)
        cls.train = split(cls.d, "train", [f"t{i}" for i in range(6)], rng)
        cls.dev = split(cls.d, "dev", [f"d{i}" for i in range(4)], rng)
        train_syms = ["AA", "B", "CH", "D", "EH", "SIL"]
        dev_syms = ["B", "EH", "SIL"]  # numbered on its own: B=0, EH=1, SIL=2
        cls.words = {}
        for name, T, syms in (("train", cls.train, train_syms), ("dev", cls.dev, dev_syms)):
            lines = []
            for i, k in enumerate(T):
                w = [syms[(i + j) % len(syms)] for j in range(2 + i % 3)]
                cls.words[k] = w
                lines.append(k + " " + " ".join(w))
            write_lines(os.path.join(cls.d, name, "text"), lines)

    def path(self, *p):
        return os.path.join(self.d, *p)

    def out(self, name):
        p = self.path(name)
        shutil.rmtree(p, ignore_errors=True)
        return p

    def test_labels_without_vocab_refused(self):
        out = self.out("dev-none")
        r = run("import", "kaldi", self.path("dev", "feats.scp"), out, "--text",
                self.path("dev", "text"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("labels need a vocabulary", r.stderr)
        self.assertIn("--vocab FILE", r.stderr)
        self.assertIn("ctxshard vocab", r.stderr)
        self.assertIn("--vocab-from-data", r.stderr)
        self.assertFalse(os.path.exists(out))
        r = run("import", "kaldi", self.path("dev", "feats.ark"), out, "--ali",
                self.path("dev", "text"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("data/lang/phones.txt", r.stderr)
        with self.assertRaises(ValueError) as e:
            ctxshard.import_kaldi(self.path("dev", "feats.scp"), out,
                                  text=self.path("dev", "text"))
        self.assertIn("vocab=", str(e.exception))
        self.assertIn("write_vocab", str(e.exception))
        self.assertIn("vocab_from_data=True", str(e.exception))
        self.assertFalse(os.path.exists(out))
        # both given, or the option without labels: usage errors
        r = run("import", "kaldi", self.path("dev", "feats.scp"), out, "--text",
                self.path("dev", "text"), "--vocab", self.path("dev", "text"),
                "--vocab-from-data")
        self.assertEqual(r.returncode, 2)
        r = run("import", "kaldi", self.path("dev", "feats.scp"), out, "--vocab-from-data")
        self.assertEqual(r.returncode, 2)
        with self.assertRaises(ValueError):
            ctxshard.import_kaldi(self.path("dev", "feats.scp"), out, vocab_from_data=True)
        # the library's own rule, for C callers (the command and Python
        # refuse before they call it)
        from ctypes import byref
        from ctxshard import _native as N
        wo, ko, diag = N.WriterOpts(), N.KaldiOpts(), N.Diag()
        N.lib.cxs_writer_opts_init(byref(wo))
        N.lib.cxs_kaldi_opts_init(byref(ko))
        no_progress = N.PROGRESS_FN(0)
        ko.text = os.fsencode(self.path("dev", "text"))
        rc = N.lib.cxs_import_kaldi(os.fsencode(self.path("dev", "feats.scp")),
                                    os.fsencode(out), byref(wo), byref(ko), no_progress, None,
                                    None, byref(diag))
        self.assertEqual(rc, N.E_INVALID)
        self.assertIn("labels need a vocabulary", diag.message.decode())
        self.assertIn("CXS_KALDI_VOCAB_FROM_DATA", diag.message.decode())
        self.assertFalse(os.path.exists(out))
        ko.flags = 2  # CXS_KALDI_VOCAB_FROM_DATA
        rc = N.lib.cxs_import_kaldi(os.fsencode(self.path("dev", "feats.scp")),
                                    os.fsencode(out), byref(wo), byref(ko), no_progress, None,
                                    None, byref(diag))
        self.assertEqual(rc, 0, diag.message)
        shutil.rmtree(out)

    def test_second_split_numbered_like_the_first(self):
        train = self.out("train.cxs")
        r = run("import", "kaldi", self.path("train", "feats.scp"), train, "--text",
                self.path("train", "text"), "--vocab-from-data")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("built from the data", r.stdout)
        with ctxshard.open(train) as ds:
            train_vocab = list(ds.vocab)
        self.assertEqual(train_vocab, ["AA", "B", "CH", "D", "EH", "SIL"])
        r = run("vocab", train)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "".join(s + "\n" for s in train_vocab))
        vfile = write_lines(self.path("vocab.txt"), r.stdout.splitlines())
        self.assertEqual(ctxshard.write_vocab(train, self.path("vocab-py.txt")), train_vocab)
        with open(self.path("vocab-py.txt")) as f:
            self.assertEqual(f.read(), r.stdout)
        with ctxshard.open(train) as ds:
            self.assertEqual(ctxshard.write_vocab(ds), train_vocab)

        def check(out):
            with ctxshard.open(out) as ds:
                self.assertEqual(ds.vocab, train_vocab)
                for u, k in enumerate(ds.ids):
                    self.assertEqual([train_vocab[i] for i in ds.label_seq(u)], self.words[k])

        dev = self.out("dev.cxs")
        r = run("import", "kaldi", self.path("dev", "feats.scp"), dev, "--text",
                self.path("dev", "text"), "--vocab", vfile)
        self.assertEqual(r.returncode, 0, r.stderr)
        check(dev)
        for name, vocab in (("dev-py", vfile), ("dev-list", train_vocab)):
            ctxshard.import_kaldi(self.path("dev", "feats.scp"), self.out(name),
                                  text=self.path("dev", "text"), vocab=vocab)
            check(self.path(name))
            self.assertIsNone(same_dataset(dev, self.path(name)))
        # numbered on its own, dev's labels would mean other symbols
        own = self.out("dev-own")
        info = ctxshard.import_kaldi(self.path("dev", "feats.scp"), own,
                                     text=self.path("dev", "text"), vocab_from_data=True)
        self.assertEqual(info["vocab_size"], 3)
        with ctxshard.open(own) as ds:
            self.assertEqual(ds.vocab, ["B", "EH", "SIL"])

    def test_features_only_has_no_vocab(self):
        out = self.out("feats-only")
        self.assertEqual(run("import", "kaldi", self.path("dev", "feats.scp"), out).returncode, 0)
        r = run("vocab", out)
        self.assertEqual(r.returncode, 1)
        self.assertIn("features only: no vocabulary", r.stderr)
        self.assertEqual(r.stdout, "")
        with self.assertRaises(ValueError):
            ctxshard.write_vocab(out)

    def test_symbol_tables(self):
        phones = ["<eps>", "SIL", "AA", "B", "CH", "D", "EH", "#0", "#1"]
        table = write_lines(self.path("phones.txt"), [f"{s} {i}" for i, s in enumerate(phones)])
        ali = self.path("ali.txt")
        write_lines(ali, [k + " " + " ".join(str(1 + (t % 6)) for t in range(T))
                          for k, T in self.dev.items()])
        out = self.out("ali.cxs")
        r = run("import", "kaldi", self.path("dev", "feats.scp"), out, "--ali", ali,
                "--vocab", table)
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("vocab", out)
        self.assertEqual(r.stdout.splitlines(), phones)
        # the printed vocabulary takes the next split's ali-to-phones
        # integers as the table did (and as a Python list)
        printed = write_lines(self.path("printed.txt"), r.stdout.splitlines())
        ali2 = write_lines(self.path("ali2.txt"), [
            k + " " + " ".join(str(1 + ((t + 2) % 6)) if t % 2 else phones[1 + ((t + 2) % 6)]
                               for t in range(T)) for k, T in self.dev.items()])
        with ctxshard.open(out) as ds:
            n_train = len(ds.ids)
        for name, voc in (("ali2.cxs", table), ("ali2-printed.cxs", printed)):
            r = run("import", "kaldi", self.path("dev", "feats.scp"), self.out(name), "--ali",
                    ali2, "--vocab", voc)
            self.assertEqual(r.returncode, 0, r.stderr)
        ctxshard.import_kaldi(self.path("dev", "feats.scp"), self.out("ali2-list.cxs"),
                              ali=ali2, vocab=phones)
        for name in ("ali2-printed.cxs", "ali2-list.cxs"):
            self.assertIsNone(same_dataset(self.path("ali2.cxs"), self.path(name)))
        with ctxshard.open(self.path("ali2.cxs")) as ds:
            self.assertEqual(len(ds.ids), n_train)
            for u, (k, T) in enumerate(sorted(self.dev.items())):
                self.assertEqual(list(np.asarray(ds.utterance(u)[2])),
                                 [1 + ((t + 2) % 6) for t in range(T)])
        # a gap in the ids: refused naming the id without a line
        gap = write_lines(self.path("gap.txt"), [f"{s} {i + 1}" for i, s in enumerate(phones)])
        r = run("import", "kaldi", self.path("dev", "feats.scp"), self.out("gap.cxs"), "--ali",
                ali, "--vocab", gap)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("gap.txt: symbol table of 9 lines without id 0", r.stderr)
        self.assertIn("<eps> 0", r.stderr)
        with self.assertRaises(ctxshard.CtxshardError) as e:
            ctxshard.import_kaldi(self.path("dev", "feats.scp"), self.out("gap.cxs"), ali=ali,
                                  vocab=gap)
        self.assertIn("without id 0", str(e.exception))

    def test_pack_default_is_the_same_for_every_split(self):
        """pack's default vocabulary is the fixed phoneme list, never the
        split's own symbols; `ctxshard vocab` of a packed split is a file
        pack's --vocab takes."""
        raw_tr, raw_dev = self.out("raw-train"), self.out("raw-dev")
        self.assertEqual(run("synth", raw_tr, "--utts", 4, "--quiet").returncode, 0)
        self.assertEqual(run("synth", raw_dev, "--utts", 2, "--offset", 4, "--quiet",
                             "--seed", 1).returncode, 0)
        tr, dev = self.out("p-train"), self.out("p-dev")
        self.assertEqual(run("pack", raw_tr, tr, "--quiet").returncode, 0)
        r = run("vocab", tr)
        self.assertEqual(r.stdout.splitlines(), list(ctxshard.PHONEMES))
        vfile = write_lines(self.path("pv.txt"), r.stdout.splitlines())
        self.assertEqual(run("pack", raw_dev, dev, "--quiet", "--vocab", vfile).returncode, 0)
        self.assertEqual(run("vocab", dev).stdout, r.stdout)
        dev2 = self.out("p-dev2")
        self.assertEqual(run("pack", raw_dev, dev2, "--quiet").returncode, 0)
        self.assertIsNone(same_dataset(dev, dev2))


class Specifiers(unittest.TestCase):
    """Every form Kaldi recipes write, through the command and Python."""

    @classmethod
    def setUpClass(cls):
        cls.d = tempfile.mkdtemp(dir=TMP)
        rng = np.random.default_rng(5)
        cls.T = split(cls.d, "train", [f"u{i}" for i in range(5)], rng)
        cls.base = os.path.join(cls.d, "train")
        write_lines(os.path.join(cls.base, "text"), [f"{k} a b" for k in cls.T])
        write_lines(os.path.join(cls.base, "text.unsorted"),
                    [f"{k} a b" for k in reversed(list(cls.T))])
        cls.ref = os.path.join(cls.d, "ref")
        r = run("import", "kaldi", os.path.join(cls.base, "feats.ark"), cls.ref)
        assert r.returncode == 0, r.stderr

    def p(self, name):
        return os.path.join(self.base, name)

    def both(self, spec, *cli, **py):
        """Import spec through the command and through Python: (the
        command's result, the Python exception or None, the outputs)."""
        outs = []
        for k in ("cli", "py"):
            o = os.path.join(self.d, f"o-{k}")
            shutil.rmtree(o, ignore_errors=True)
            outs.append(o)
        r = run("import", "kaldi", spec, outs[0], "--quiet", *cli)
        err = None
        try:
            ctxshard.import_kaldi(spec, outs[1], **py)
        except (ctxshard.CtxshardError, ValueError, OSError) as e:
            err = e
        return r, err, outs

    def accepted(self, spec, *cli, **py):
        r, err, outs = self.both(spec, *cli, **py)
        self.assertEqual(r.returncode, 0, f"{spec}: {r.stderr}")
        self.assertIsNone(err, f"{spec}: {err}")
        if not cli:
            for o in outs:
                self.assertIsNone(same_dataset(self.ref, o), spec)
        return outs

    def refused(self, spec, want, *cli, code=1, **py):
        r, err, outs = self.both(spec, *cli, **py)
        self.assertEqual(r.returncode, code, f"{spec}: {r.stderr}")
        self.assertIn(want, r.stderr, spec)
        self.assertIsNotNone(err, spec)
        self.assertIn(want, str(err), spec)
        for o in outs:
            self.assertFalse(os.path.exists(o), spec)

    def test_rspecifier_options_read_as_kaldi_reads_them(self):
        ark, scp = self.p("feats.ark"), self.p("feats.scp")
        for spec in ("ark:" + ark, "ark,t:" + ark, "ark,b:" + ark, "ark,s,cs:" + ark,
                     "ark,o:" + ark, "ark,no:" + ark, "ark,bg:" + ark, "ark,ns,ncs,np:" + ark,
                     "t,ark:" + ark, "ark,f:" + ark, "ark,nf:" + ark, "scp:" + scp,
                     "scp,s,cs:" + scp, "scp,t:" + scp, "scp,o,s,cs:" + scp,
                     "ark,scp:" + ark + "," + scp, "ark,scp,t:" + ark + "," + scp):
            self.accepted(spec)
        # the unsorted copies: sorted unless s promises order
        self.accepted("ark,o:" + self.p("unsorted.ark"))
        self.accepted("scp,cs:" + self.p("unsorted.scp"))
        self.refused("ark,s:" + self.p("unsorted.ark"), "option s says the archive is sorted")
        self.refused("scp,s,cs:" + self.p("unsorted.scp"), "option s says the listing is sorted")

    def test_options_refused_naming_them(self):
        ark = self.p("feats.ark")
        self.refused("ark,p:" + ark, "option p (permissive")
        self.refused("scp,p:" + self.p("feats.scp"), "--on-error skip")
        self.refused("ark,x:" + ark, "option 'x' is not one of Kaldi's")
        self.refused("ark,,t:" + ark, "an empty option")
        self.refused("t,s:" + ark, "neither ark nor scp")
        self.refused("scp,ark:" + ark, "ark,scp:ARCHIVE,SCRIPT")
        self.refused("ark,scp:" + ark, "ark,scp:ARCHIVE,SCRIPT")
        self.refused("ark:" + ark + " ", "ends in white space")

    def test_pipes_and_standard_input(self):
        pipe = f"ark:copy-feats scp:{self.p('feats.scp')} ark:- |"
        self.refused(pipe, "is a pipe")
        self.refused(pipe, "copy-feats scp:data/train/feats.scp ark,scp:feats.ark,feats.scp")
        self.refused(f"copy-feats scp:{self.p('feats.scp')} ark:- |", "is a pipe")
        self.refused("ark:-", "standard input is not read")
        self.refused("scp:-", "standard input is not read")

    def test_data_directory(self):
        self.refused(self.base, f"give {self.base}/feats.scp")
        self.refused(self.base + "/", f"--text {self.base}/text")
        empty = os.path.join(self.d, "empty")
        os.makedirs(empty, exist_ok=True)
        self.refused(empty, "a directory without a feats.scp")
        self.refused("scp:" + self.base, f"give {self.base}/feats.scp")

    def test_label_specifiers(self):
        scp = self.p("feats.scp")
        outs = self.accepted(scp, "--text", "ark,t:" + self.p("text"), "--vocab-from-data",
                             text="ark,t:" + self.p("text"), vocab_from_data=True)
        plain = os.path.join(self.d, "plain")
        shutil.rmtree(plain, ignore_errors=True)
        self.assertEqual(run("import", "kaldi", scp, plain, "--text", self.p("text"),
                             "--vocab-from-data").returncode, 0)
        for o in outs:
            self.assertIsNone(same_dataset(plain, o))
        self.accepted(scp, "--text", "ark:" + self.p("text.unsorted"), "--vocab-from-data",
                      text="ark:" + self.p("text.unsorted"), vocab_from_data=True)
        self.refused(scp, "option s says the file is sorted", "--text",
                     "ark,s:" + self.p("text.unsorted"), "--vocab-from-data",
                     text="ark,s:" + self.p("text.unsorted"), vocab_from_data=True)
        self.refused(scp, "not through an scp", "--text", "scp:" + self.p("text"),
                     "--vocab-from-data", text="scp:" + self.p("text"), vocab_from_data=True)
        self.refused(scp, "is a pipe", "--ali", "ark:ali-to-phones x ark:- |",
                     "--vocab-from-data", ali="ark:ali-to-phones x ark:- |",
                     vocab_from_data=True)


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
