"""Importers: feature stores of other tools into a packed dataset, in the
library (lib/import/kaldi_import.c through ctxshard_import.h), the code behind
`ctxshard import`: the same input and options give the same bytes.

    ctxshard.import_kaldi("data/train/feats.scp", "train.cxs",
                          ali="exp/tri3_ali/phones.txt", dtype="float16")
"""
import os
import sys
from ctypes import byref

from . import _args as _a
from . import _native as _n
from ._native import lib as _lib
from .writer import _info_dict, _progress_fn, _raise_write
from .writer import _writer_opts as _common_opts

__all__ = ["import_kaldi", "import_hdf5"]

_KINDS = ("FM", "DM", "FV", "DV", "CM", "CM2", "CM3", "text")


def _optional_path(func, name, value):
    return None if value is None else os.fsencode(_a.path(func, name, value))


def import_kaldi(src, out, text=None, ali=None, vocab=None, sort=True, dtype="float32", guard=64,
                 shard_size="1G", compress=None, chunk_size="64K", shuffle=True, normalize=None,
                 on_error="fail", threads=None, progress=None, notes=None, part=None,
                 block_sums=True):
    """Import Kaldi features into a packed dataset at out: the rules and
    the bytes of `ctxshard import kaldi SRC OUT` with the same options.

    - src: a feats.scp (`utt path.ark:offset` lines; relative paths from
      the current directory, as Kaldi reads them) or a bare archive
      (.ark; an "scp:" or "ark:" prefix says which).  Binary FM, DM, FV,
      DV and the compressed CM, CM2, CM3, decoded exactly as Kaldi does;
    - text: a Kaldi text file (label sequences), or ali: per-frame
      alignments (`utt p1 .. pT`, ali-to-phones --per-frame=true: frame
      labels), at most one; vocab: their vocabulary file (a Kaldi symbol
      table or one symbol per line), or None to build it from the data;
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
    if vocab is not None and text is None and ali is None:
        raise ValueError(f"{f}: vocab= applies with text= or ali=")
    o = _writer_opts(f, dtype, guard, shard_size, compress, chunk_size, shuffle, normalize,
                     on_error, threads, block_sums)
    ko = _n.KaldiOpts()
    _lib.cxs_kaldi_opts_init(byref(ko))
    ko.text = _optional_path(f, "text", text)
    ko.ali = _optional_path(f, "ali", ali)
    ko.vocab = _optional_path(f, "vocab", vocab)
    ko.flags = 0 if _a.flag(f, "sort", sort) else _n.KALDI_NO_SORT
    if part is not None:
        try:
            pi, pn = (map(int, part.split("/")) if isinstance(part, str) else map(int, part))
        except (TypeError, ValueError):
            raise ValueError(f"{f}: part={part!r}: expected 'I/N' or (I, N)") from None
        if not 1 <= pi <= pn <= 100000:
            raise ValueError(f"{f}: part={part!r}: expected 1 <= I <= N <= 100000")
        ko.part, ko.parts = pi, pn
    cb = _Callbacks(progress, notes)
    ko.note = cb.note_fn
    info, diag = _n.ImportInfo(), _n.Diag()
    try:
        rc = _lib.cxs_import_kaldi(os.fsencode(src), os.fsencode(out), byref(o), byref(ko),
                                   cb.prog_fn, None, byref(info), byref(diag))
    finally:
        cb.close()
    return cb.result(rc, info, diag)


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

    def __init__(self, progress, notes):
        self.errors = []
        self.notes = notes
        self.report, self.bar = _progress_fn(progress, 0)
        if self.bar is not None:
            self.bar.set_description("import")
        self.note_fn = _n.NOTE_FN(self._note)
        self.prog_fn = _n.PROGRESS_FN(self._tick)

    def _note(self, _user, msg):
        m = msg.decode("utf-8", "replace")
        try:
            if self.notes is None:
                sys.stderr.write(f"ctxshard: {m}\n")
            else:
                self.notes(m)
        except BaseException as e:
            self.errors.append(e)

    def _tick(self, _user, done, total):
        if self.errors:
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
        if self.bar is not None:
            self.bar.close()

    def result(self, rc, info, diag):
        if self.errors:
            raise self.errors[0]
        if rc:
            _raise_write(rc, diag)
        res = _info_dict(info.w)
        res.update(listed=info.listed, input_bytes=info.input_bytes, sorted=bool(info.sorted),
                   vocab_size=info.vocab_size,
                   kinds=[k for i, k in enumerate(_KINDS) if info.kinds & (1 << i)])
        return res
