"""What every Python loader does with its C loader, without torch: the
arguments that depend on the dataset (labels, targets, a list of datasets
for a mixture, options of opening, streaming), the C loader made with the
library's diagnostic, its batches waited for, and the Python loader
standing where the C loader says (utterances._follow) until the pass ends
and the handle is freed; the frame loader's order, place and state
(_FrameOrder, over cxs_sampler and cxs_loader's positions).  The torch adapters (ctxshard.torch and its
modules) turn the batches into tensors."""
import collections.abc
import ctypes
import errno
import os
import warnings

from . import (BLOCK, SEQUENTIAL, SHUFFLE, WEIGHTED, Dataset, Sampler, _args as _a,
               _native as _n, _raise, memory_available)
from . import utterances as _u
from ._native import lib as _lib


def _labels_default(func, ds, labels):
    """labels=None: whether the dataset has them; True on a features-only
    dataset is an error that says so."""
    labels = _a.optional_flag(func, "labels", labels)
    if labels is None:
        return ds.has_frame_labels
    if labels and not ds.has_frame_labels:
        if ds.has_label_seqs:
            raise ValueError(f"{func}: labels=True, but {ds.path} has label sequences only, no "
                             "per-frame labels: whole-utterance batches carry them as targets "
                             "(UtteranceLoader, UtteranceDataset); or pass labels=False")
        raise ValueError(f"{func}: labels=True, but {ds.path} has no labels (features only, "
                         "like a test split): leave labels unset (the default: labels when "
                         "the dataset has them) or pass labels=False")
    return labels


def _frame_labels(func, ds, labels):
    """The frame Loader's labels: True unless labels=False was asked, so that
    a call yields one shape, (x, y), whatever dataset it is given; a
    dataset without frame labels then needs labels=False, said here."""
    labels = _a.optional_flag(func, "labels", labels)
    if labels is None and not ds.has_frame_labels:
        what = ("label sequences only, no per-frame labels" if ds.has_label_seqs
                else "no labels (features only, like a test split)")
        raise ValueError(f"{func}: {ds.path} has {what}, and batches are (x, y) unless "
                         "labels=False is asked: pass labels=False for batches of x alone")
    return _labels_default(func, ds, True if labels is None else labels)


def _targets_default(func, ds, targets):
    """targets=None: whether the dataset has label sequences; True on one
    without them is an error that says so."""
    targets = _a.optional_flag(func, "targets", targets)
    if targets is None:
        return ds.has_label_seqs
    if targets and not ds.has_label_seqs:
        raise ValueError(f"{func}: targets=True, but {ds.path} has no label sequences (pack it "
                         "with --transcripts sequence or both): leave targets unset or pass "
                         "targets=False")
    return targets


def _mixture_or(cls, base, path, args, kw, positional, refusal, mixture):
    """Loader([a, b, ...]) and UtteranceLoader([...]) (`base`): a list of
    datasets makes the mixture's loader (mixture() its class), which takes
    at most `positional` arguments by position after it (`refusal` says
    which); anything else an instance of cls."""
    if cls is base and isinstance(path, (list, tuple)):
        if len(args) > positional:  # (the positions after those differ)
            raise TypeError(refusal)
        return mixture()(path, *args, **kw)
    return object.__new__(cls)


def _opens_itself(func, path, **given):
    """Options of opening (hugepage_budget, cache, cache_limit) apply when
    the loader opens the dataset itself, from a path or URL: refused with
    a Dataset, which was opened already."""
    if isinstance(path, Dataset):
        for k, v in given.items():
            if v is not None:
                raise ValueError(f"{func}: {k}= applies when the loader opens the dataset (a "
                                 f"path or URL); open it with ctxshard.open(path, {k}=...)")


def _streams(func, path, stream, block, needs, device, gpu_emulate):
    """Whether a loader opening path itself streams it (Dataset(stream=)):
    stream=None streams a URL read in block order on the host; True
    insists (refused in any other order, or with a device)."""
    if isinstance(path, Dataset):
        return False
    if stream is not None:
        stream = _a.flag(func, "stream", stream)
        if stream and not block:
            raise ValueError(f"{func}: stream=True needs {needs} (the block order is what the "
                             f"features are fetched in)")
        if stream and (device is not None or gpu_emulate):
            raise ValueError(f"{func}: stream=True serves host batches; the GPU loaders read a "
                             f"whole dataset (leave stream unset)")
        return stream
    return bool(block and device is None and not gpu_emulate and
                _lib.cxs_is_url(os.fsencode(path)))


_WAIT_MS = 100  # the slices a slow batch is waited for in (see _batches)


def _batches(next_fn, ptr, batch_type, what, timed=None):
    """A C loader's batches (next_fn: cxs_loader_next_ex,
    cxs_utt_loader_next_ex, or a mixture loader's next) until its epoch
    ends, a failure raised with the diagnostic the library kept (file,
    utterance, reason).  timed (cxs_loader_next_timed,
    cxs_utt_loader_next_timed, cxs_mix_loader_next_timed,
    cxs_mix_utt_loader_next_timed): a batch that is
    slow to come (a streamed block behind a slow server) is waited for in
    slices of _WAIT_MS, so that Ctrl-C raises KeyboardInterrupt between
    them (Python runs its signal handlers only between the C calls); a
    ready batch is one call, as with next_fn.  The caller's finally frees
    the loader, which ends a stream's transfers."""
    bp, diag = ctypes.POINTER(batch_type)(), _n.Diag()
    while True:
        if timed is None:
            rc = next_fn(ptr, ctypes.byref(bp), ctypes.byref(diag))
        else:
            rc = timed(ptr, ctypes.byref(bp), _WAIT_MS, ctypes.byref(diag))
            while rc == -errno.ETIMEDOUT:
                rc = timed(ptr, ctypes.byref(bp), _WAIT_MS, ctypes.byref(diag))
        if rc:
            _raise(rc, diag, what=what)
        if not bp:
            return
        yield bp.contents


def _opened(create, what, *args):
    """A C loader made by create(*args, &handle, &diag); a refusal raised
    with the library's diagnostic."""
    ptr, diag = ctypes.c_void_p(), _n.Diag()
    rc = create(*args, ctypes.byref(ptr), ctypes.byref(diag))
    if rc:
        _raise(rc, diag, what=what)
    return ptr


def _served(loader, ptr, kind, batch_type, what, convert):
    """What convert(batch) makes of each batch of C loader `ptr` (kind
    "utt_loader", "mix_loader" ...: its calls cxs_<kind>_next_timed,
    _position and _free), copied before the next is asked for, while
    `loader` (the Python loader, or the sampler that holds its position)
    stands where the C loader says, after each batch and after the pass
    (utterances._follow).  The C loader is freed when the iteration ends,
    however it ends."""
    position = getattr(_lib, f"cxs_{kind}_position")
    try:
        timed = getattr(_lib, f"cxs_{kind}_next_timed")
        for b in _batches(None, ptr, batch_type, what, timed):
            out = convert(b)
            _u._follow(loader, position, ptr, what)
            yield out
        _u._follow(loader, position, ptr, what)
    finally:
        getattr(_lib, f"cxs_{kind}_free")(ptr)


def _pool_layout(reason):
    """The GPU pool's layout in its reason (what comes before ';': segments
    and rows), which fixes its block order: a resume must find it again."""
    return reason.split(";")[0]


class _FrameOrder:
    """The frame Loader's order and place, without torch: its sampler (a
    resumed epoch's starts at the global position it resumes from), its
    length, set_epoch, the state as a dict and the background warm-up.
    ctxshard.torch.Loader sets the attributes (dataset, sampler, epoch,
    _origin, _start, ...) and serves the batches."""

    # The block schedule's version, asked of the library (cxs_block_order): a
    # state saved mid-epoch under another version would resume into another
    # order.
    BLOCK_ORDER = int(_lib.cxs_block_order())

    @staticmethod
    def _order_kind(f, shuffle, weighted, memory, blocks):
        """The sampler kind of shuffle= and weighted=, with memory= and
        blocks= checked (the block sampler's, refused for the others)."""
        if shuffle == "block":
            if weighted:
                raise ValueError(f"{f}: shuffle=\"block\" and weighted sampling exclude each "
                                 "other: choose one")
            if memory is None:
                raise ValueError(f"{f}: shuffle=\"block\" needs memory=, the page cache the "
                                 "order may use (bytes, or a string like \"2G\"; "
                                 "ctxshard.memory_available() says what is free here).  The "
                                 "order depends on it: resume with the same value")
            memory = _a.size(f, "memory", memory)
            blocks = _a.optional_integer(f, "blocks", blocks, 1, 1024)
        elif memory is not None or blocks is not None:
            raise ValueError(f"{f}: memory= and blocks= apply to shuffle=\"block\" only")
        kind = WEIGHTED if weighted else (BLOCK if shuffle == "block" else
                                          SHUFFLE if shuffle else SEQUENTIAL)
        return kind, memory, blocks

    def _start_prefetch(self, prefetch, kind, budget):
        """prefetch: warm the dataset into the page cache in a background
        thread when it fits in the memory available (a cold first epoch then
        reads at the disk's sequential rate instead of one random fault per
        window; a dataset already cached costs one mincore pass).  A full
        shuffle over a dataset larger than that memory thrashes: say so once,
        and name the block sampler.  The block sampler reads its blocks
        ahead itself, within its budget: no warm-up there (it would fill the
        page cache the budget is meant to spare)."""
        mem = memory_available()["available"]
        size = self.dataset.nbytes
        if kind == BLOCK:
            if budget > mem:
                warnings.warn(
                    f"ctxshard: shuffle=\"block\" with memory={budget} bytes "
                    f"({budget / 2**30:.2f} GiB), more than the memory available "
                    f"({mem / 2**30:.2f} GiB): blocks will be evicted before they are drained. "
                    "Give a smaller memory=.", UserWarning, stacklevel=3)
            return
        if size > mem:
            if kind == SHUFFLE:
                warnings.warn(
                    f"ctxshard: {self.dataset.path} ({size / 2**30:.2f} GiB) is larger than the "
                    f"memory available ({mem / 2**30:.2f} GiB): a full shuffle reads it at "
                    "random, one disk read per window, every epoch.  Use the block sampler, "
                    "Loader(..., shuffle=\"block\", memory=...), which reads blocks of "
                    "utterances sequentially within that budget.", UserWarning, stacklevel=3)
            return
        # started once the first batch is out (_kick_prefetch): a cached
        # dataset's residency check would otherwise compete with it
        self._prefetch = prefetch

    def _kick_prefetch(self):
        """The warm-up: the library's (Dataset.warm(background=True)), in
        its own thread at the lowest priority, reading only what is not
        cached yet."""
        if self._prefetch:
            self._prefetch = False
            try:
                self._warming = self.dataset.warm(background=True, skip_cached=True)
            except Exception:  # noqa: BLE001 - no thread, a closed dataset: no warm-up
                self._warming = None

    def wait_prefetch(self):
        """Wait until the background warm-up (prefetch=True) is done
        (starting it now if no batch has been taken yet)."""
        self._kick_prefetch()
        if self._warming is not None:
            try:
                self._warming.wait()
            except Exception:  # noqa: BLE001 - a failed warm-up only costs speed
                pass

    def __len__(self):
        """Batches of this rank in the epoch in progress: a full epoch, or
        after load_state_dict() what remains of it (counted from where it
        resumes), as the next iteration yields them."""
        n = len(self._sampler_now())
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def set_epoch(self, epoch):
        """Serve `epoch` next: kept where the loader stands when it is
        positioned in that epoch (state_dict()'s epoch: right after
        load_state_dict() of a state in it, or a pass stopped mid-way);
        any other epoch from its start.  After a complete pass of e the
        loader stands at the start of e + 1 (set_epoch(e) then serves e
        again).  docs/python.md, "Epochs and resume"."""
        _u._set_epoch("Loader", self, epoch)

    _KINDS = {SEQUENTIAL: "sequential", SHUFFLE: "shuffle", WEIGHTED: "weighted", BLOCK: "block"}

    def _sampler_now(self):
        """The sampler of the epoch in progress: self.sampler, or for an
        epoch resumed at global position G one whose epochs start at G."""
        if not self._origin:
            return self.sampler
        s = self._origin_sampler
        if s is None or s.origin != self._origin:
            m = self.sampler
            s = self._origin_sampler = Sampler(
                self.dataset, m.kind, m.seed, m.rank, m.world_size, m.drop_last, m.num_samples,
                m._weights, m.memory, m.blocks if m.kind == BLOCK else None, self._origin)
        return s

    def _position(self):
        return self._global_position()

    def _global_position(self):
        """(epoch, global position) of the next sample: every rank has
        served origin + position * world_size samples of the global order
        together (ranks step in lockstep, as with DistributedSampler)."""
        g = self._origin + self._start * self.world_size
        if g >= self.sampler.epoch_samples:  # the epoch is done (padding included)
            return self.epoch + 1, 0
        if self.drop_last and len(self._sampler_now()) - self._start < self.batch_size:
            return self.epoch + 1, 0  # what is left is the dropped tail
        return self.epoch, g

    def state_dict(self):
        """Where the run stands: seed, epoch and global_position (samples of
        the epoch's global order served by all ranks together), with what
        fixes that order (sampler, epoch_samples, and for the block sampler
        memory, blocks and block_order, the version of its schedule), and,
        for information, this rank's position,
        rank, world_size, batch_size and context."""
        epoch, g = self._global_position()
        m = self.sampler
        st = {"seed": self.seed, "epoch": epoch, "global_position": g,
              "sampler": self._KINDS[m.kind], "epoch_samples": m.epoch_samples,
              "position": self._start if epoch == self.epoch else 0, "rank": self.rank,
              "world_size": self.world_size, "batch_size": self.batch_size,
              "context": self.context}
        if m.kind == BLOCK:
            st["memory"], st["blocks"] = m.memory, m.blocks
            st["block_order"] = self.BLOCK_ORDER
        if self.gpu_mode == "pool" and self.gpu_info:  # its blocks are its segments
            st["gpu_pool"] = _pool_layout(self.gpu_info["reason"])
        return st

    def load_state_dict(self, state):
        """Continue where state_dict() was taken, on this loader's ranks and
        threads: the same seed, sampler and (block) memory and blocks are
        required, since they fix the order; world_size, threads and
        batch_size may differ.  With ranks, every rank loads the same
        state (any rank's, as long as all stood at the same position)."""
        f = "Loader.load_state_dict"
        if not isinstance(state, collections.abc.Mapping):
            raise TypeError(f"{f}: state={_a._show(state)} is a {type(state).__name__}, "
                            "expected the dict that Loader.state_dict() returned")
        mine = self.state_dict()
        # what identifies the order is required: a state stripped of it
        # would load for any dataset and serve another order.  (A state
        # saved before global positions has position, world_size and
        # samples_per_epoch instead.)
        legacy = "global_position" not in state and "samples_per_epoch" in state
        need = ["seed", "epoch"] + (["position", "world_size", "samples_per_epoch"] if legacy
                                    else ["global_position", "sampler", "epoch_samples"])
        if mine["sampler"] == "block":
            need += ["memory", "blocks"]
        missing = [k for k in need if k not in state]
        if missing:
            raise ValueError(f"{f}: state lacks {', '.join(missing)}: expected the dict that "
                             "Loader.state_dict() returned")
        for key in ("seed", "sampler", "epoch_samples", "memory", "blocks"):
            if key in state and state[key] != mine.get(key):
                raise ValueError(f"{f}: {key} {state[key]!r} does not match this "
                                 f"loader's {mine.get(key)!r}: the order would differ")
        epoch = _a.integer(f, "state['epoch']", state["epoch"], 0, _u.MAX_EPOCH)
        total = self.sampler.epoch_samples
        if "global_position" in state:
            g = _a.integer(f, "state['global_position']", state["global_position"], 0, total,
                           f"0..epoch_samples = 0..{total}")
        else:  # saved before global positions: all ranks at `position`
            ws = _a.integer(f, "state['world_size']", state["world_size"], 1, 2**32 - 1)
            m = self.sampler
            ref = len(Sampler(self.dataset, m.kind, m.seed, 0, ws, m.drop_last, m.num_samples,
                              m._weights, m.memory, m.blocks if m.kind == BLOCK else None))
            if state["samples_per_epoch"] != ref:
                raise ValueError(f"{f}: samples_per_epoch {state['samples_per_epoch']!r} does "
                                 f"not match this loader's {ref} on {ws} ranks: the state is "
                                 "of another dataset or order")
            g = _a.integer(f, "state['position']", state["position"], 0, total) * ws
            if g > total:
                raise ValueError(f"{f}: state['position'] * state['world_size'] = {g} is past "
                                 f"the epoch's {total} samples")
        if g >= total and epoch == _u.MAX_EPOCH:
            raise ValueError(f"{f}: state['epoch'] = {epoch} is complete, and the next epoch "
                             f"is past the last one ({_u.MAX_EPOCH})")
        if g >= self.sampler.epoch_samples:
            epoch, g = epoch + 1, 0
        saved = state.get("block_order", 1)  # states without it: the first schedule
        if "block_order" in mine and g and saved != mine["block_order"]:
            raise ValueError(f"load_state_dict: the state was saved mid-epoch with block order "
                             f"{saved}, this ctxshard draws block order {mine['block_order']} "
                             "(its schedule changed): resuming inside that epoch would repeat "
                             "some frames and skip others.  Resume at the next epoch: "
                             f"state['epoch'] = {epoch + 1}, state['global_position'] = 0")
        self.epoch, self._origin, self._start = epoch, g, 0
        # the GPU pool's block order depends on its layout: checked when the
        # device loader is made (_iter_gpu)
        self._want_pool = state.get("gpu_pool")
