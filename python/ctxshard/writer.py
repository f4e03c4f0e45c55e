"""Writing datasets: ctxshard.Writer (utterances from memory) through
libctxshard's writer, the code behind `ctxshard pack` (ctxshard.pack, in
importers.py, is the library's raw-directory importer): the same
utterances give the same bytes.

    with ctxshard.Writer("train.cxs", vocab="phonemes", dtype="float16") as w:
        for utt_id, feats, phones in my_corpus():    # feats: [T, D] floats
            w.add(utt_id, feats, labels=phones)      # symbols, or vocabulary indices
    # committed here; an exception inside the block leaves nothing behind

Label sequences (a phoneme sequence per utterance, any length, for CTC or
attention models): Writer(..., transcripts="sequence") and
w.add(utt_id, feats, seq=phones); transcripts="both" takes labels= and seq=.
"""
import os
import sys
from ctypes import POINTER, addressof, byref, c_char, c_char_p, c_size_t, c_uint32, c_void_p, cast

import numpy as np

from . import _args as _a
from . import _native as _n
from ._native import lib as _lib

__all__ = ["Writer", "RejectedUtterance", "PHONEMES"]



def _phonemes():
    n = c_uint32()
    p = _lib.cxs_phonemes(byref(n))
    return tuple(p[i].decode() for i in range(n.value))


# The vocabulary `ctxshard pack` uses when RAW has transcripts and no
# --vocab is given: HW1P2's 40 phonemes, then [SOS] and [EOS] (the
# library's list, cxs_phonemes).
PHONEMES = _phonemes()

_STORED = {"float32": _n.DTYPE_F32, "f32": _n.DTYPE_F32, "float16": _n.DTYPE_F16,
           "f16": _n.DTYPE_F16, "bfloat16": _n.DTYPE_BF16, "bf16": _n.DTYPE_BF16,
           "q8": _n.DTYPE_Q8, "q16": _n.DTYPE_Q16}
_INPUT = {2: _n.DTYPE_F16, 4: _n.DTYPE_F32, 8: _n.DTYPE_F64}
_LITTLE_HOST = sys.byteorder == "little"
_UTT_DTYPE = np.dtype(_n.WriterUtt)  # cxs_writer_utt as numpy lays out an array of them
_TRANSCRIPTS = {"frames": _n.SEQ_NONE, "sequence": _n.SEQ_ONLY, "both": _n.SEQ_WITH_FRAMES}


class RejectedUtterance(ValueError):
    """Writer.add refused an utterance (the rules of `ctxshard pack`): id is
    the utterance, reason what is wrong.  The writer is unchanged and stays
    usable: skip it (Writer.skip records it in the dataset) or abort."""

    def __init__(self, utt_id, reason):
        super().__init__(f"{utt_id}: {reason}")
        self.id = utt_id
        self.reason = reason


def _stored_dtype(func, value):
    key = value
    if not isinstance(value, str):
        try:
            key = np.dtype(value).name
        except TypeError:
            key = None
    if key not in _STORED:
        raise ValueError(f"{func}: dtype={value!r} is not a stored type: 'float32' (default), "
                         "'float16', 'bfloat16', 'q8' or 'q16'")
    return _STORED[key]


def _vocab_list(func, vocab):
    """None, "phonemes", a path to a file of one symbol per line, or symbols."""
    if vocab is None:
        return None
    if isinstance(vocab, str) and vocab == "phonemes":
        return list(PHONEMES)
    if isinstance(vocab, (str, bytes, os.PathLike)):
        path = os.fspath(vocab)
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            raise OSError(e.errno, f"{func}: vocab={path!r}: {e.strerror}") from None
        lines = text.decode("utf-8", "replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        for i, s in enumerate(lines):
            if not s.strip():
                raise ValueError(f"{func}: {path}: line {i + 1} is empty (one symbol per line, "
                                 "no blank lines)")
        return [s.rstrip("\r") for s in lines]
    syms = list(vocab)
    if not all(isinstance(s, str) for s in syms):
        raise TypeError(f"{func}: vocab must be None, 'phonemes', a file, or a list of str")
    return syms


def _compression(func, compress):
    """(codec, level) from None/False, True, "zstd", "zstd:LEVEL" or a level."""
    if compress is None or compress is False:
        return _n.COMPRESSION_NONE, 3
    if compress is True or compress == "zstd":
        return _n.COMPRESSION_ZSTD, 3
    if isinstance(compress, str) and compress.startswith("zstd:") and compress[5:].isdigit():
        return _n.COMPRESSION_ZSTD, int(compress[5:])
    if not isinstance(compress, str):
        return _n.COMPRESSION_ZSTD, _a.integer(func, "compress", compress, 1, 19)
    raise ValueError(f"{func}: compress={compress!r}: expected None, 'zstd', 'zstd:LEVEL' "
                     "(1..19) or a level")


def _writer_opts(f, dtype, guard, shard_size, compress, chunk_size, shuffle, normalize,
                 threads, block_sums=True):
    """The writer options every client of the writer takes (Writer, the
    importers), checked in the caller f's words."""
    o = _n.WriterOpts()
    _lib.cxs_writer_opts_init(byref(o))
    if not _a.flag(f, "block_sums", block_sums):
        o.flags |= _n.WRITER_NO_BLOCK_SUMS
    o.dtype = _stored_dtype(f, dtype)
    o.guard = _a.integer(f, "guard", guard, 0, 4096)
    o.shard_size = _a.size(f, "shard_size", shard_size)
    o.compression, o.level = _compression(f, compress)
    o.chunk_size = _a.size(f, "chunk_size", chunk_size)
    o.shuffle = int(_a.flag(f, "shuffle", shuffle))
    threads = _a.optional_integer(f, "threads", threads, 1, 256)
    o.threads = min(_lib.cxs_cpu_count(), 256) if threads is None else threads
    if normalize in (None, False, "none"):
        o.normalize = _n.NORM_NONE
    elif normalize == "utterance":
        o.normalize = _n.NORM_UTTERANCE
    else:
        raise ValueError(f"{f}: normalize={normalize!r}: expected None or 'utterance'")
    return o


class Writer:
    """A packed dataset being written at out, one utterance at a time.

    Writer(out, dtype="float32", vocab=None, guard=64, shard_size="1G",
           compress=None, chunk_size="64K", shuffle=True, normalize=None,
           on_error="raise", threads=None, transcripts="frames", dim=None,
           block_sums=True)

    - dtype: stored type, "float32", "float16" or "bfloat16" (round to
      nearest even; features may come in float16, float32 or float64), or
      "q8" / "q16": Kaldi's compressed matrices (one or two bytes a value,
      coded per utterance exactly as Kaldi's CopyFromMat codes them, after
      normalize; no guard rows are stored, whatever guard says);
    - vocab: None (features only), "phonemes" (HW1P2's 42 symbols, what
      `ctxshard pack` uses), a file of one symbol per line, or a list of str;
    - compress: None, "zstd", "zstd:LEVEL" or a level 1..19; chunk_size and
      shuffle are its options;
    - normalize: None or "utterance" (per-utterance mean/variance, stored);
    - on_error: "raise" (add raises RejectedUtterance) or "skip" (add
      records the utterance as skipped and returns False).  Either way a
      skip is never silent: it is in the dataset (`ctxshard info`,
      Dataset.skipped), in Writer.skipped and commit()'s "skipped", and
      commit() warns (UserWarning) with the count and the first reasons.
      Ids out of order, or repeated, are an error (ValueError) whatever
      on_error says: skipping them would drop the rest of an unsorted
      stream;
    - dim: features per frame, fixed up front (an utterance of another
      width is then a bad utterance); None: the first utterance's width.
      `ctxshard pack` takes the most common width of the files; a stream
      whose first utterance may be odd should pass dim=;
    - threads: compression threads (default: all CPUs); the bytes are the
      same for any number;
    - transcripts (with a vocabulary): "frames" (default): add takes
      labels=, one per frame; "sequence": add takes seq=, the utterance's
      label sequence (any length >= 1, bare or framed by [SOS] .. [EOS]),
      and the dataset has no frame labels; "both": labels= and seq=;
    - block_sums: True (default): a checksum per 64 KiB of features and per
      4 KiB of labels and tables besides the section checksums (format
      1.3), so that `verify`, `warm` and the block sampler name the
      utterances a damaged block holds; False: the bytes of format 1.2
      writers (damage is then detected, not located).

    Nothing is visible at out until commit() (or the end of a `with`
    block): everything is written into a temporary directory beside it,
    fsynced and renamed into place; a previous dataset at out is replaced
    only then.  abort(), an exception in the `with` block, a crash or a
    full disk leave out as it was.  Not thread-safe."""

    def __init__(self, out, dtype="float32", vocab=None, guard=64, shard_size="1G",
                 compress=None, chunk_size="64K", shuffle=True, normalize=None, on_error="raise",
                 threads=None, transcripts="frames", dim=None, block_sums=True):
        f = "Writer"
        out = _a.path(f, "out", out)
        o = _writer_opts(f, dtype, guard, shard_size, compress, chunk_size, shuffle, normalize,
                         threads, block_sums)
        o.dim = _a.optional_integer(f, "dim", dim, 1, 65536) or 0
        self._on_error = _a.choice(f, "on_error", on_error, ("raise", "skip"))
        o.on_error_skip = int(on_error == "skip")
        self.transcripts = _a.choice(f, "transcripts", transcripts, tuple(_TRANSCRIPTS))
        syms = _vocab_list(f, vocab)
        if transcripts != "frames" and not syms:
            raise ValueError(f"{f}: transcripts={transcripts!r}: label sequences need a "
                             "vocabulary (vocab=)")
        o.label_seqs = _TRANSCRIPTS[transcripts]
        self.vocab = tuple(syms) if syms is not None else None
        self._sorted = None  # no vocabulary: features only
        if syms:
            # symbols -> indices by binary search in the sorted vocabulary
            self._order = np.argsort(np.array(syms), kind="stable")
            self._sorted = np.array(syms)[self._order]
            enc = [s.encode("utf-8") for s in syms]
            arr = (c_char_p * len(enc))(*enc)
            o.vocab_size, o.vocab = len(enc), cast(arr, POINTER(c_char_p))
        self.path = out
        self._skipped = []
        self._w = c_void_p()
        diag = _n.Diag()
        rc = _lib.cxs_writer_create(os.fsencode(out), byref(o), byref(self._w), byref(diag))
        if rc:
            self._w = None
            _raise_write(rc, diag)

    # -- the life cycle ---------------------------------------------------

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.commit()
        else:
            self.abort()
        return False

    def __del__(self):
        if getattr(self, "_w", None):
            _lib.cxs_writer_abort(self._w)
            self._w = None

    def _live(self, what):
        if not self._w:
            raise ValueError(f"Writer.{what}: the writer is closed (committed or aborted)")
        return self._w

    @property
    def closed(self):
        return not self._w

    def commit(self):
        """Finish the dataset and rename it into place.  Returns the final
        counts (see info).  The writer is closed afterwards, whatever the
        outcome; on failure nothing is left behind."""
        w = self._live("commit")
        self._w = None
        info, diag = _n.WriterInfo(), _n.Diag()
        rc = _lib.cxs_writer_commit(w, byref(info), byref(diag))
        if rc:
            _raise_write(rc, diag)
        d = _info_dict(info)
        d["skipped"] = list(self._skipped)
        if self._skipped:
            n = len(self._skipped)
            first = "; ".join(f"{i}: {r}" for i, r in self._skipped[:3])
            import warnings
            warnings.warn(f"ctxshard: {self.path}: {n} utterance{'s' * (n != 1)} skipped, "
                          f"{d['num_utterances']} written ({first}{'; ...' if n > 3 else ''}); "
                          f"`ctxshard info {self.path}` lists them", UserWarning, stacklevel=2)
        return d

    def abort(self):
        """Discard everything written; out stays as it was.  Idempotent."""
        if self._w:
            _lib.cxs_writer_abort(self._w)
            self._w = None

    @property
    def skipped(self):
        """The utterances left out so far, as (id, reason) pairs, in order."""
        return list(self._skipped)

    @property
    def info(self):
        """Counts so far: num_utterances, num_frames, num_skipped, num_shards
        (finished), dim (0 before the first utterance), bytes_written."""
        info = _n.WriterInfo()
        _lib.cxs_writer_info_get(self._live("info"), byref(info))
        return _info_dict(info)

    # -- utterances -------------------------------------------------------

    def skip(self, utt_id, reason):
        """Record that utt_id was left out, and why (`ctxshard info` lists it,
        one line each: the id and the reason may hold no TAB or newline)."""
        w = self._live("skip")
        bid = _id_bytes(utt_id, "Writer.skip")
        why = str(reason)
        if not bid or any(b < 0x20 for b in bid):
            raise ValueError(f"Writer.skip: utterance id {utt_id!r}: empty or holds a control "
                             "byte (TAB, LF ...): the skip list has one line per utterance")
        if any(c in why for c in "\t\n\r"):
            raise ValueError(f"Writer.skip: {bid.decode('utf-8', 'replace')}: reason {why!r} "
                             "holds a TAB or newline: the skip list has one line per utterance")
        self._record_skip(w, bid, why, "Writer.skip")

    def _record_skip(self, w, bid, why, func):
        if _lib.cxs_writer_skip(w, bid, why.encode("utf-8", "replace")):
            raise MemoryError(f"{func}: out of memory")
        self._skipped.append((bid.decode("utf-8", "replace"), why))

    def add(self, utt_id, x, labels=None, seq=None):
        """Append one utterance: utt_id (str or bytes; ids must increase in
        byte order), x [T, D] float16/32/64 in any memory order and byte
        order (numpy array or anything numpy.asarray takes), labels (with a
        vocabulary): T vocabulary indices or symbols, or the HW1P2
        transcript form [SOS], T symbols, [EOS]; seq (transcripts="sequence"
        or "both"): the label sequence, vocabulary indices or symbols, any
        number >= 1, bare or as [SOS] p1 .. pn [EOS] (HW3P2).  Returns True; a refused
        utterance raises RejectedUtterance (on_error="raise") or is
        recorded as skipped and add returns False (on_error="skip")."""
        w = self._live("add")
        bid = _id_bytes(utt_id, "Writer.add")
        shown = bid.decode("utf-8", "replace")
        try:
            u, keep = self._utterance(shown, x, labels, seq)
        except RejectedUtterance as e:
            return self._rejected(w, bid, e)
        diag = _n.Diag()
        rc = _lib.cxs_writer_add(w, bid, byref(u), byref(diag))
        del keep
        if rc == 0:
            return True
        msg = diag.message.decode("utf-8", "replace")
        if rc == _n.E_INPUT:
            reason = msg[len(shown) + 2:] if msg.startswith(shown + ": ") else msg
            return self._rejected(w, bid, RejectedUtterance(shown, reason))
        _raise_write(rc, diag)

    def add_many(self, ids, x, lengths, labels=None):
        """Append many utterances in one call: the bytes of add() called for
        each in turn, at a fraction of the cost per utterance when they are
        small (add() spends 3-10 microseconds per call in Python and
        ctypes, longer than the library takes to write 8 frames).

        ids: n utterance ids (str or bytes, increasing in byte order); x:
        the utterances' frames one after another, [sum(lengths), D] (any
        float type, memory order and byte order, as add() takes); lengths:
        n frame counts (each >= 1); labels (with a vocabulary): one per
        frame, concatenated like x (sum(lengths) indices or symbols; the
        transcript form with [SOS] and [EOS] and label sequences are add()'s
        alone).  A refused utterance is raised (RejectedUtterance, the ones
        before it added) or, with on_error="skip", recorded as skipped and
        passed.  Returns how many utterances were added."""
        w = self._live("add_many")
        if self.transcripts != "frames":
            raise ValueError("Writer.add_many: the writer takes label sequences "
                             f"(transcripts={self.transcripts!r}): add them with add(seq=)")
        ids = list(ids)
        n = len(ids)
        lens = np.asarray(lengths)
        if lens.ndim != 1 or lens.size != n or (n and lens.dtype.kind not in "iu"):
            raise ValueError(f"Writer.add_many: lengths must be {n} integers (one frame count "
                             "per id)")
        lens = lens.astype(np.int64)
        a = np.asarray(x)
        if a.dtype.kind != "f" or a.dtype.itemsize not in _INPUT or a.ndim != 2:
            raise ValueError(f"Writer.add_many: x has dtype {a.dtype} and {a.ndim} dimensions, "
                             "expected [frames, dim] float16, float32 or float64")
        total = int(lens.sum()) if n else 0
        if (lens < 0).any() or total != a.shape[0]:
            raise ValueError(f"Writer.add_many: lengths add up to {total} frames, x has "
                             f"{a.shape[0]}")
        if n == 0:
            return 0
        if a.strides == (0, 0):  # broadcast: 0,0 would mean C order
            a = np.ascontiguousarray(a)
        # the ids as one block of NUL-terminated strings and their addresses
        if all(type(i) is str for i in ids):
            blob = "\0".join(ids).encode("utf-8", "surrogateescape") + b"\0"
        else:
            blob = b"\0".join(_id_bytes(i, "Writer.add_many") for i in ids) + b"\0"
        ends = np.flatnonzero(np.frombuffer(blob, np.uint8) == 0)
        if len(ends) != n:
            bad = next(i for i in ids if "\0" in (i if isinstance(i, str) else i.decode("latin-1")))
            raise ValueError(f"Writer.add_many: utterance id {bad!r} holds a NUL byte")
        id_buf = np.frombuffer(blob, np.uint8)
        ptrs = np.empty(n, np.uint64)
        ptrs[0] = 0
        ptrs[1:] = ends[:-1] + 1
        ptrs += id_buf.ctypes.data
        starts = np.zeros(n, np.int64)
        np.cumsum(lens[:-1], out=starts[1:])
        u = np.zeros(n, _UTT_DTYPE)
        rs, cs = a.strides
        u["data"] = a.ctypes.data + starts * rs
        u["frames"] = lens
        u["dim"] = a.shape[1]
        u["type"] = _INPUT[a.dtype.itemsize]
        bo = a.dtype.byteorder
        u["big_endian"] = int(bo == ">" or (bo == "=" and not _LITTLE_HOST))
        u["row_stride"], u["col_stride"] = rs, cs
        keep = [a]
        if labels is not None:
            if self._sorted is None:
                raise ValueError("Writer.add_many: labels given, but the writer has no "
                                 "vocabulary (features only): pass vocab= to Writer")
            lab = np.asarray(labels)
            if lab.ndim != 1 or lab.size != total:
                raise ValueError(f"Writer.add_many: labels must be one per frame, "
                                 f"concatenated: {total} in one dimension (got shape "
                                 f"{lab.shape})")
            if lab.dtype.kind not in "iuUSO":
                raise TypeError(f"Writer.add_many: labels have dtype {lab.dtype}: expected "
                                "vocabulary indices (integers) or symbols (str)")
            try:
                lab = self._labels("Writer.add_many", lab, total, "frame")
            except RejectedUtterance:
                # a symbol outside the vocabulary: add() names the utterance
                # and the frame, and skips it or raises as on_error says
                added = 0
                for i in range(n):
                    s0, s1 = int(starts[i]), int(starts[i] + lens[i])
                    added += bool(self.add(ids[i], a[s0:s1], labels=lab[s0:s1]))
                return added
            keep.append(lab)
            u["labels"] = lab.ctypes.data + starts * 8
            u["label_count"] = lens
            u["label_size"] = 8
        diag, got = _n.Diag(), c_size_t()
        usize = _UTT_DTYPE.itemsize
        done = added = 0
        while done < n:
            rc = _lib.cxs_writer_add_many(w, int(ptrs.ctypes.data) + 8 * done,
                                          int(u.ctypes.data) + usize * done, n - done,
                                          byref(got), byref(diag))
            done += got.value
            added += got.value
            if rc == 0:
                break
            bid = blob[int(ptrs[done]) - id_buf.ctypes.data:int(ends[done])]
            shown = bid.decode("utf-8", "replace")
            msg = diag.message.decode("utf-8", "replace")
            if rc != _n.E_INPUT:
                _raise_write(rc, diag)
            reason = msg[len(shown) + 2:] if msg.startswith(shown + ": ") else msg
            self._rejected(w, bid, RejectedUtterance(shown, reason))
            done += 1
        del keep
        return added

    def _rejected(self, w, bid, e):
        if self._on_error == "raise":
            raise e
        # the packer's reasons are one line; a path in one may not be
        why = "".join(" " if c in "\t\n\r" else c for c in e.reason)
        if any(b < 0x20 for b in bid):  # an id the skip list cannot hold either
            raise e
        self._record_skip(w, bid, why, "Writer.add")
        return False

    def _utterance(self, shown, x, labels, seq=None):
        a = np.asarray(x)
        if a.dtype.kind != "f" or a.dtype.itemsize not in _INPUT:
            raise RejectedUtterance(shown, f"features have dtype {a.dtype}, expected float16, "
                                    "float32 or float64")
        if a.ndim != 2:
            raise RejectedUtterance(shown, f"features have {a.ndim} dimensions, expected 2 "
                                    "(frames, dim)")
        T, D = a.shape
        if T and D and a.strides == (0, 0):  # broadcast: 0,0 would mean C order
            a = np.ascontiguousarray(a)
        u = _n.WriterUtt()
        u.data, u.frames, u.dim = _address(a), T, D
        u.type = _INPUT[a.dtype.itemsize]
        bo = a.dtype.byteorder
        u.big_endian = int(bo == ">" or (bo == "=" and not _LITTLE_HOST))
        u.row_stride, u.col_stride = a.strides
        keep = [a]
        if labels is not None:
            lab = self._labels(shown, labels, T)
            keep.append(lab)
            u.labels, u.label_count, u.label_size = _address(lab), lab.size, 8
        if seq is not None:
            if self.transcripts == "frames":
                raise ValueError(f"Writer.add: {shown}: seq given, but the writer takes no "
                                 "label sequences: pass transcripts='sequence' or 'both' to "
                                 "Writer")
            sq = self._labels(shown, seq, -1, "sequence position")
            keep.append(sq)
            u.seq, u.seq_count, u.seq_size = _address(sq), sq.size, 8
        return u, keep

    def _labels(self, shown, labels, T, where=None):
        if self._sorted is None:
            raise ValueError(f"Writer.add: {shown}: labels given, but the writer has no "
                             "vocabulary (features only): pass vocab= to Writer")
        lab = np.asarray(labels)
        if lab.size == 0 and lab.dtype.kind == "f":  # [] is float64 to numpy
            lab = lab.astype(np.int64)
        if lab.ndim != 1:
            raise RejectedUtterance(shown, f"labels have {lab.ndim} dimensions, expected "
                                    + ("a 1-D sequence" if where else "one label per frame"))
        if lab.dtype.kind in "iu":
            return np.ascontiguousarray(lab, dtype=np.int64)
        if lab.dtype.kind not in "USO":
            raise TypeError(f"Writer.add: {shown}: labels have dtype {lab.dtype}: expected "
                            "vocabulary indices (integers) or symbols (str)")
        if where is None:
            where = "position" if lab.size == T + 2 else "frame"
        if lab.dtype.kind == "O":
            if not all(isinstance(s, str) for s in lab.tolist()):
                raise TypeError(f"Writer.add: {shown}: labels must be vocabulary indices "
                                "(integers) or symbols (str)")
            lab = lab.astype(str) if lab.size else np.zeros(0, "<U1")
        elif lab.dtype.kind == "S":
            lab = np.char.decode(lab, "utf-8", "replace")
        # vectorised lookup: the position of each symbol in the sorted vocabulary
        pos = np.searchsorted(self._sorted, lab)
        pos[pos == len(self._sorted)] = 0
        ok = self._sorted[pos] == lab
        if not ok.all():
            j = int(np.argmin(ok))
            raise RejectedUtterance(shown, f"{where} {j}: unknown symbol '{lab[j]}'")
        return np.ascontiguousarray(self._order[pos], dtype=np.int64)


def _address(a, _char=c_char.from_buffer):
    """The address of a's first element: a.ctypes.data, which costs more
    than a small utterance's writing (about 1.2 us), taken through the
    buffer protocol in 0.2 us when numpy exports a plain buffer (a
    writable, C-contiguous, non-empty array)."""
    try:
        return addressof(_char(a))
    except (TypeError, ValueError, BufferError):
        return a.ctypes.data


def _id_bytes(utt_id, func="Writer"):
    if isinstance(utt_id, bytes):
        b = utt_id
    elif isinstance(utt_id, str):
        b = utt_id.encode("utf-8", "surrogateescape")
    else:
        raise TypeError(f"{func}: utterance id {utt_id!r} is a {type(utt_id).__name__}, "
                        "expected str or bytes")
    # the library takes C strings: a NUL would cut the id short
    if b"\0" in b:
        raise ValueError(f"{func}: utterance id {utt_id!r} holds a NUL byte")
    return b


def _info_dict(info):
    return {"num_utterances": info.num_utterances, "num_frames": info.num_frames,
            "num_skipped": info.num_skipped, "num_shards": info.num_shards, "dim": info.dim,
            "bytes_written": info.bytes_written}


def _raise_write(rc, diag):
    from . import _raise
    _raise(rc, diag)


def _progress_fn(progress, total):
    if callable(progress):
        return progress, None
    if not progress:
        return None, None
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        bar = tqdm(total=total, unit="utt", desc="pack")
        return (lambda done, n: bar.update(done - bar.n)), bar
    state = {"last": -1}

    def text(done, n):
        pct = 100 * done // max(n, 1)
        if pct != state["last"]:
            state["last"] = pct
            sys.stderr.write(f"\rpack: {done}/{n} utterances ({pct}%)")
            if done == n:
                sys.stderr.write("\n")
            sys.stderr.flush()
    return text, None
