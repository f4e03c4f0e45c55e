"""Importers: raw .npy directories and the feature stores of other tools
into a packed dataset, in the library (lib/import/ through
ctxshard_import.h), the code behind `ctxshard pack`, `ctxshard check` and
`ctxshard import`: the same input and options give the same bytes.

    ctxshard.pack("hw1p2/train-clean-100", "train.cxs", dtype="float16")
    ctxshard.import_kaldi("data/train/feats.scp", "train.cxs",
                          ali="exp/tri3_ali/phones.txt", dtype="float16")
"""
import errno
import os
import signal
import sys
import threading
import warnings
from ctypes import byref, c_char_p

from . import _args as _a
from . import _native as _n
from ._native import lib as _lib
from .writer import RejectedUtterance, _info_dict, _progress_fn, _raise_write
from .writer import _writer_opts as _common_opts

__all__ = ["pack", "check", "import_kaldi", "import_hdf5", "write_vocab"]

_KINDS = ("FM", "DM", "FV", "DV", "CM", "CM2", "CM3", "text")
_KALDI_VOCAB_FROM_DATA = 2  # cxs_kaldi_opts.flags: CXS_KALDI_VOCAB_FROM_DATA


def _optional_path(func, name, value):
    return None if value is None else os.fsencode(_a.path(func, name, value))


def _part(f, part):
    """(I, N) of part= ("I/N" or a pair), or (0, 0) for the whole."""
    if part is None:
        return 0, 0
    try:
        pi, pn = (map(int, part.split("/")) if isinstance(part, str) else map(int, part))
    except (TypeError, ValueError):
        raise ValueError(f"{f}: part={part!r}: expected 'I/N' or (I, N)") from None
    if not 1 <= pi <= pn <= 100000:
        raise ValueError(f"{f}: part={part!r}: expected 1 <= I <= N <= 100000")
    return pi, pn


class _NpyRun:
    """What cxs_import_npy says while it runs: warnings, notes, the
    utterances it left out or zero-filled, and the problems a check found."""

    def __init__(self, f, progress, notes, keep_problems):
        self.f = f
        self.cb = _Callbacks(progress, notes, f)
        self.keep = keep_problems
        self.problems, self.filled, self.failed = [], {}, None
        self.warn_fn = _n.NOTE_FN(self._warn)
        self.event_fn = _n.NPY_EVENT_FN(self._event)

    def _warn(self, _user, msg):
        try:
            warnings.warn(f"ctxshard: {self.f}: {msg.decode('utf-8', 'replace')}", UserWarning,
                          stacklevel=3)
        except BaseException as e:
            self.cb.errors.append(e)

    def _event(self, _user, kind, uid, count, d):
        try:
            uid = os.fsdecode(uid)
            if kind == _n.NPY_FILLED:
                self.filled[uid] = int(count)
                return
            c = d.contents
            msg = c.message.decode("utf-8", "replace")
            where = os.fsdecode(c.file) if c.file else None
            self.failed = (uid, msg, where)
            if self.keep:
                self.problems.append({"id": uid, "file": where, "reason": msg,
                                      "system": c.code != _n.E_INPUT})
        except BaseException as e:
            self.cb.errors.append(e)


def _not_a_directory(f, rc, diag):
    """RAW or its mfcc/ missing, or not a directory: the directory's
    problem, raised as the OSError it is."""
    if rc in (-errno.ENOENT, -errno.ENOTDIR):
        m = diag.message.decode("utf-8", "replace")
        raise OSError(-rc, f"{f}: {m}")


def _refused(f, rc, diag):
    """Input the rules refuse as a whole (no .npy files, no valid
    utterance, a bad vocabulary): ValueError, as the Writer's refusals."""
    if rc in (_n.E_INPUT, _n.E_INVALID):
        raise ValueError(f"{f}: {diag.message.decode('utf-8', 'replace')} (nothing written)")


def _npy_opts(f, run, vocab, sos, eos, transcripts, fill_nonfinite, part, o):
    no = _n.NpyOpts()
    _lib.cxs_npy_opts_init(byref(no))
    keep = []
    if isinstance(vocab, (str, bytes, os.PathLike)) and vocab != "phonemes":
        no.vocab_file = os.fsencode(_a.path(f, "vocab", vocab))
    elif vocab is not None and vocab != "phonemes":
        syms = list(vocab)
        if not syms or not all(isinstance(x, str) for x in syms):
            raise TypeError(f"{f}: vocab must be None, 'phonemes', a file, or a list of str")
        keep = [x.encode() for x in syms]
        arr = (c_char_p * len(keep))(*keep)
        keep.append(arr)
        o.vocab = arr
        o.vocab_size = len(syms)
    for name, v in (("sos", sos), ("eos", eos)):
        if v is not None:
            if not isinstance(v, str):
                raise TypeError(f"{f}: {name}= must be a str")
            setattr(no, name, v.encode())
    no.transcripts = _n.TRANSCRIPTS[_a.choice(f, "transcripts", transcripts,
                                               tuple(_n.TRANSCRIPTS))]
    if _a.flag(f, "fill_nonfinite", fill_nonfinite):
        no.flags |= _n.NPY_FILL_NONFINITE
    no.part, no.parts = _part(f, part)
    no.note = run.cb.note_fn
    no.warn = run.warn_fn
    no.event = run.event_fn
    return no, keep


def pack(raw, out, dtype="float32", vocab=None, guard=64, shard_size=None, compress=None,
         chunk_size="64K", shuffle=True, normalize=None, on_error="fail", progress=None,
         threads=None, transcripts="frames", fill_nonfinite=False, block_sums=True, sos=None,
         eos=None, part=None, notes=None):
    """Pack a raw directory in the HW1P2 layout (RAW/mfcc/<id>.npy, and
    RAW/transcript/<id>.npy when there are labels) into out, in this
    process: the library's raw-directory importer (cxs_import_npy), the
    code behind `ctxshard pack RAW OUT`: the same rules, messages and
    bytes with the same options.

    - vocab: None or "phonemes" (HW1P2's 42 symbols, PHONEMES: a fixed
      list, the same for every split), a file of one symbol per line (as
      write_vocab writes a dataset's), or a list of symbols (another
      split's Dataset.vocab); sos, eos: the symbols
      that open and close every transcript (None: [SOS], [EOS]);
    - transcripts: what RAW/transcript holds, as `--transcripts`: "frames"
      (default; [SOS], one symbol per frame, [EOS]), "sequence" (a label
      sequence of any length, HW3P2) or "both" (frames, plus the sequence
      of the frame labels' runs);
    - dtype, guard, shard_size (None: 1G, or with part= a size that gives
      every part work), compress, chunk_size, shuffle, normalize,
      block_sums: as for Writer; threads: files read ahead, and
      compression threads (default: all CPUs);
    - on_error: "fail" (nothing written on a bad utterance: ValueError
      naming the file and the reason) or "skip" (left out and listed);
    - fill_nonfinite: store NaN and infinite feature values as 0 and keep
      the utterance (`--fill-nonfinite`; for a test split, which needs a
      row per frame), listed in the result's "zero_filled" ({id: values})
      and in a warning;
    - part: None (the whole), or "I/N" or (I, N): the I-th of N slices of
      whole shards (`ctxshard merge` joins them);
    - progress: a callable (done, total), True for a bar (tqdm when
      installed), or None; notes: a callable taking each note (the widths
      of a mixed directory, a part's shard size), or None to print them on
      stderr.  Layout mistakes (a directory that is not read) are
      warnings.

    Returns the counts (as Writer.commit) with "listed", "input_bytes",
    "skipped" ([(id, reason)] of the utterances left out) and, with
    fill_nonfinite, "zero_filled"."""
    f = "pack"
    raw = _a.path(f, "raw", raw)
    out = _a.path(f, "out", out)
    on_error = _a.choice(f, "on_error", on_error, ("fail", "skip"))
    readers = _a.optional_integer(f, "threads", threads, 1, 1024)
    o = _writer_opts(f, dtype, guard, shard_size if shard_size is not None else "1G", compress,
                     chunk_size, shuffle, normalize, on_error, None, block_sums)
    o.threads = readers or _lib.cxs_cpu_count()  # readers; the writer takes at most 256
    if shard_size is None:
        o.shard_size = 0  # the importer's default (chosen for the parts with part=)
    run = _NpyRun(f, progress, notes, keep_problems=True)
    no, keep = _npy_opts(f, run, vocab, sos, eos, transcripts, fill_nonfinite, part, o)
    info, diag = _n.ImportInfo(), _n.Diag()
    try:
        run.cb.arm()
        rc = _lib.cxs_import_npy(os.fsencode(raw), os.fsencode(out), byref(o), byref(no),
                                 run.cb.prog_fn, None, byref(info), byref(diag))
    finally:
        run.cb.close()
    del keep
    if run.cb.errors:
        raise run.cb.errors[0]
    if rc == _n.E_INPUT and run.failed is not None and on_error == "fail":
        uid, msg, where = run.failed
        e = RejectedUtterance(uid, msg)
        e.args = (f"pack: {msg} (nothing written; on_error='skip' leaves bad utterances out, "
                  f"ctxshard.check({raw!r}) lists every problem)",)
        e.file = where
        raise e
    _not_a_directory(f, rc, diag)
    _refused(f, rc, diag)
    done = run.cb.result(rc, info, diag)
    del done["sorted"], done["kinds"]
    done["skipped"] = [(p["id"], p["reason"]) for p in run.problems]
    if done["skipped"]:  # as Writer.commit says it
        n, sk = len(done["skipped"]), done["skipped"]
        first = "; ".join(f"{i}: {r}" for i, r in sk[:3])
        warnings.warn(f"ctxshard: {out}: {n} utterance{'s' * (n != 1)} skipped, "
                      f"{done['num_utterances']} written ({first}{'; ...' if n > 3 else ''}); "
                      f"`ctxshard info {out}` lists them", UserWarning, stacklevel=2)
    if not info.has_labels and info.w.num_skipped:
        from . import Dataset, warn_if_incomplete
        with Dataset(out) as ds:
            warn_if_incomplete("pack", ds)
    if fill_nonfinite:
        done["zero_filled"] = dict(run.filled)
        if run.filled:
            shown = ", ".join(list(run.filled)[:5]) + (", ..." if len(run.filled) > 5 else "")
            warnings.warn(f"ctxshard: pack: zero-filled {info.filled_values} NaN or infinite "
                          f"values in {info.filled_utts} utterance"
                          f"{'s' if info.filled_utts != 1 else ''} of {out} ({shown}; "
                          "fill_nonfinite=True)", UserWarning, stacklevel=2)
    return done


def check(raw, vocab=None, sos=None, eos=None, transcripts="frames", fill_nonfinite=False,
          threads=None, progress=None, notes=None):
    """Every validation of pack over a raw directory, nothing written:
    `ctxshard check RAW`.  Options as for pack.  Returns {"listed",
    "valid", "frames", "dim", "labels" (RAW has transcript/), "problems"}:
    problems is a list of {"id", "file", "reason", "system"} in id order
    (system: the machine failed to read the file), empty for a directory
    pack would take whole."""
    f = "check"
    raw = _a.path(f, "raw", raw)
    readers = _a.optional_integer(f, "threads", threads, 1, 1024)
    o = _writer_opts(f, "float32", 0, "1G", None, "64K", True, None, "fail", None, True)
    o.threads = readers or _lib.cxs_cpu_count()
    run = _NpyRun(f, progress, notes, keep_problems=True)
    no, keep = _npy_opts(f, run, vocab, sos, eos, transcripts, fill_nonfinite, None, o)
    info, diag = _n.ImportInfo(), _n.Diag()
    try:
        run.cb.arm()
        rc = _lib.cxs_import_npy(os.fsencode(raw), None, byref(o), byref(no), run.cb.prog_fn,
                                 None, byref(info), byref(diag))
    finally:
        run.cb.close()
    del keep
    if run.cb.errors:
        raise run.cb.errors[0]
    _not_a_directory(f, rc, diag)
    _refused(f, rc, diag)
    if rc:
        _raise_write(rc, diag)
    return {"listed": int(info.listed), "valid": int(info.w.num_utterances),
            "frames": int(info.w.num_frames), "dim": int(info.w.dim),
            "labels": bool(info.has_labels), "problems": run.problems}


def import_kaldi(src, out, text=None, ali=None, vocab=None, sort=True, dtype="float32", guard=64,
                 shard_size="1G", compress=None, chunk_size="64K", shuffle=True, normalize=None,
                 on_error="fail", threads=None, progress=None, notes=None, part=None,
                 block_sums=True, vocab_from_data=False):
    """Import Kaldi features into a packed dataset at out: the rules and
    the bytes of `ctxshard import kaldi SRC OUT` with the same options.

    - src: a feats.scp (`utt path.ark:offset` lines; relative paths from
      the current directory, as Kaldi reads them) or a bare archive
      (.ark), or Kaldi's rspecifier of one ("scp:FILE", "ark:FILE", with
      Kaldi's options: "ark,t:", "scp,s,cs:", "ark,o:" ...: s is checked,
      p is refused, the others change nothing) or the wspecifier that
      wrote it ("ark,scp:A.ark,A.scp": the archive is read); a pipe,
      standard input and a directory are refused (CtxshardError, code
      E_INPUT) saying what to give.  Binary FM, DM, FV, DV and the compressed CM, CM2, CM3,
      decoded exactly as Kaldi does;
    - text: a Kaldi text file (label sequences), or ali: per-frame
      alignments (`utt p1 .. pT`, ali-to-phones --per-frame=true: frame
      labels), at most one (also as "ark:FILE", "ark,t:FILE");
    - vocab: their vocabulary, required with text or ali: a file (a Kaldi
      symbol table, `symbol id` lines with ids 0..n-1 as phones.txt, or
      one symbol per line, as write_vocab writes it), or a list of symbols
      (label = position: another split's `Dataset.vocab`); or
      vocab_from_data=True to number the symbols of these labels instead
      (distinct tokens in byte order, or 0..max for integers), which
      another split may number differently;
    - sort: sort an unsorted listing (True) or refuse it (False);
    - dtype, guard, shard_size, compress, chunk_size, shuffle, normalize,
      threads, block_sums: as for Writer; on_error: "fail" (nothing written on a bad
      utterance) or "skip" (left out and listed in the dataset);
    - part: None (the whole), or "I/N" or (I, N): the I-th of N slices of
      whole shards into a partial dataset (`ctxshard merge` joins them
      into the bytes of the whole import);
    - progress: a callable (done, total), True for a bar, or None;
      notes: a callable taking each message (a sorted listing, a skipped
      utterance), or None to print them on stderr.

    Returns the counts (as Writer.commit) with "listed", "input_bytes",
    "sorted", "vocab_size" and "kinds" (the object types met).  Raises
    CtxshardError (code E_INPUT for refused input, the message naming the
    file, line or offset, utterance and reason); nothing is written then."""
    f = "import_kaldi"
    src = _a.path(f, "src", src)
    out = _a.path(f, "out", out)
    if text is not None and ali is not None:
        raise ValueError(f"{f}: give text= or ali=, not both (one vocabulary per dataset)")
    from_data = _a.flag(f, "vocab_from_data", vocab_from_data)
    if vocab is not None and text is None and ali is None:
        raise ValueError(f"{f}: vocab= applies with text= or ali=")
    if from_data and text is None and ali is None:
        raise ValueError(f"{f}: vocab_from_data= applies with text= or ali=")
    if vocab is not None and from_data:
        raise ValueError(f"{f}: give vocab= or vocab_from_data=True, not both")
    if (text is not None or ali is not None) and vocab is None and not from_data:
        raise ValueError(
            f"{f}: labels need a vocabulary: vocab= the training split's (a list, "
            "ctxshard.open('train.cxs').vocab, or the file ctxshard.write_vocab('train.cxs', "
            "'vocab.txt') writes) or a Kaldi symbol table ("
            f"{'data/lang/words.txt' if text is not None else 'data/lang/phones.txt'}), or "
            "vocab_from_data=True to number the symbols of these labels (another split "
            "numbered so may give its labels other meanings); nothing written")
    o = _writer_opts(f, dtype, guard, shard_size, compress, chunk_size, shuffle, normalize,
                     on_error, threads, block_sums)
    ko = _n.KaldiOpts()
    _lib.cxs_kaldi_opts_init(byref(ko))
    ko.text = _optional_path(f, "text", text)
    ko.ali = _optional_path(f, "ali", ali)
    keep = None
    if isinstance(vocab, (str, bytes, os.PathLike)):
        ko.vocab = _optional_path(f, "vocab", vocab)
    elif vocab is not None:
        syms = list(vocab)
        if not syms or not all(isinstance(x, str) for x in syms):
            raise TypeError(f"{f}: vocab must be a file, or a non-empty list of str")
        enc = [x.encode() for x in syms]
        keep = (c_char_p * len(enc))(*enc)
        o.vocab, o.vocab_size = keep, len(enc)
    ko.flags = (0 if _a.flag(f, "sort", sort) else _n.KALDI_NO_SORT) | \
        (_KALDI_VOCAB_FROM_DATA if from_data else 0)
    ko.part, ko.parts = _part(f, part)
    cb = _Callbacks(progress, notes)
    ko.note = cb.note_fn
    info, diag = _n.ImportInfo(), _n.Diag()
    try:
        cb.arm()
        rc = _lib.cxs_import_kaldi(os.fsencode(src), os.fsencode(out), byref(o), byref(ko),
                                   cb.prog_fn, None, byref(info), byref(diag))
    finally:
        cb.close()
    del keep
    return cb.result(rc, info, diag)


def write_vocab(dataset, path=None):
    """The vocabulary of a dataset (a path, URL or open Dataset) as a list
    of symbols in label order; with path, also written there one symbol a
    line (label l on line l + 1): the file vocab= and `--vocab` take, what
    `ctxshard vocab DATASET` prints.  Import or pack the next split with it
    and its labels mean what the first split's mean.  ValueError for a
    features-only dataset (no vocabulary)."""
    f = "write_vocab"
    from . import Dataset
    from . import open as _open
    if isinstance(dataset, Dataset):
        syms = list(dataset.vocab)
    else:
        with _open(_a.path(f, "dataset", dataset)) as ds:
            syms = list(ds.vocab)
    if not syms:
        raise ValueError(f"{f}: {dataset!r}: features only: no vocabulary (no labels were "
                         "packed)")
    if path is not None:
        with open(_a.path(f, "path", path), "w", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(s + "\n" for s in syms))
    return syms


def import_hdf5(src, out, dtype="float32", guard=64, shard_size="1G", compress=None,
                chunk_size="64K", shuffle=True, normalize=None, on_error="fail", threads=None,
                progress=None, notes=None, block_sums=True):
    """Import an HDF5 file of features (no labels) into a packed dataset at
    out: `ctxshard import hdf5 SRC OUT`.  One dataset per utterance
    (Lhotse's NumpyHdf5Writer: the dataset's path is the id, its value
    [T, D] floats), or exactly the root datasets features [N, D], offsets
    [U+1] and ids [U] (in byte order).  Options, progress, notes, the
    result and the errors as for import_kaldi (CtxshardError with code
    E_UNSUPPORTED when the library was built without HDF5)."""
    f = "import_hdf5"
    src = _a.path(f, "src", src)
    out = _a.path(f, "out", out)
    o = _writer_opts(f, dtype, guard, shard_size, compress, chunk_size, shuffle, normalize,
                     on_error, threads, block_sums)
    cb = _Callbacks(progress, notes)
    info, diag = _n.ImportInfo(), _n.Diag()
    try:
        cb.arm()
        rc = _lib.cxs_import_hdf5(os.fsencode(src), os.fsencode(out), byref(o), cb.note_fn, None,
                                  cb.prog_fn, None, byref(info), byref(diag))
    finally:
        cb.close()
    return cb.result(rc, info, diag)


def _writer_opts(f, dtype, guard, shard_size, compress, chunk_size, shuffle, normalize,
                 on_error, threads, block_sums):
    on_error = _a.choice(f, "on_error", on_error, ("fail", "skip"))
    o = _common_opts(f, dtype, guard, shard_size, compress, chunk_size, shuffle, normalize,
                     threads, block_sums)
    o.on_error_skip = int(on_error == "skip")
    return o


class _Callbacks:
    """The note and progress callbacks of an import; an exception raised in
    one stops the import and is raised again after it (it cannot cross
    the C frames)."""

    def __init__(self, progress, notes, what="import"):
        self.errors = []
        self.notes = notes
        # Ctrl-C while the library runs: the Python handler runs at the
        # next callback, where an exception cannot cross the C frames; it
        # only sets a flag, the next progress call stops the run, and the
        # KeyboardInterrupt is raised after it (close, result).
        self.interrupted = False
        self._sigint = None  # (the handler replaced,) while ours is installed
        self.report, self.bar = _progress_fn(progress, 0)
        if self.bar is not None:
            self.bar.set_description(what)
        self.note_fn = _n.NOTE_FN(self._note)
        self.prog_fn = _n.PROGRESS_FN(self._tick)

    def arm(self):
        """Take SIGINT for the C call (the main thread only); close() gives
        it back."""
        if threading.current_thread() is threading.main_thread():
            try:
                self._sigint = (signal.signal(signal.SIGINT, self._on_sigint),)
            except (ValueError, OSError):
                self._sigint = None

    def _note(self, _user, msg):
        m = msg.decode("utf-8", "replace")
        try:
            if self.notes is None:
                sys.stderr.write(f"ctxshard: {m}\n")
            else:
                self.notes(m)
        except BaseException as e:
            self.errors.append(e)

    def _on_sigint(self, _signum, _frame):
        self.interrupted = True

    def _tick(self, _user, done, total):
        if self.errors or self.interrupted:
            return 1
        if self.bar is not None and self.bar.total != total:
            self.bar.total = total
        if self.report:
            try:
                self.report(done, total)
            except BaseException as e:
                self.errors.append(e)
                return 1
        return 0

    def close(self):
        if self._sigint is not None:
            old = self._sigint[0]
            signal.signal(signal.SIGINT, old if old is not None else signal.SIG_DFL)
            self._sigint = None
        if self.bar is not None:
            self.bar.close()
        if self.interrupted:
            raise KeyboardInterrupt

    def result(self, rc, info, diag):
        if self.errors:
            raise self.errors[0]
        if rc:
            _raise_write(rc, diag)
        res = _info_dict(info.w)
        res.update(listed=info.listed, input_bytes=info.input_bytes, sorted=bool(info.sorted),
                   vocab_size=info.vocab_size,
                   kinds=[k for i, k in enumerate(_KINDS) if info.kinds & (1 << i)],
                   codes_kept=info.codes_kept, reencoded=info.reencoded)
        if info.reencoded:
            # dtype q8 (q16): objects of other kinds than CM (CM2) were
            # quantized a second time; never silently
            warnings.warn(f"{info.reencoded} utterance(s) of other Kaldi kinds than the "
                          "dtype's own (CM for q8, CM2 for q16) were encoded again from their "
                          "decoded values", UserWarning, stacklevel=3)
        return res
