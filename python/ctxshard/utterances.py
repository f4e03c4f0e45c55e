"""Whole-utterance batches for sequence models (CTC, attention), without
PyTorch: the length-bucketed utterance sampler of the C library and padded
batches as numpy arrays.  ctxshard.torch builds its UtteranceLoader,
UtteranceDataset and UtteranceBatchSampler on these.

The order (lib/include/ctxshard.h, "whole-utterance batches"): utterances
shuffled per epoch, put in length buckets (quantiles of the lengths),
cut greedily into batches of at most frame_budget padded frames (batch
size * longest utterance), the batches shuffled per epoch; batch g of that
global order goes to rank g % world_size, every rank the same count
(wrapping to the epoch's first batches, or drop_last)."""
import collections.abc
import ctypes
from ctypes import byref, c_uint32, c_uint64, c_void_p

import numpy as np

from . import Dataset, _args as _a, _native as _n, _raise, normalization
from ._native import lib as _lib

__all__ = ["UtteranceSampler", "pad_batch", "pad_targets", "PAD_LABEL"]

PAD_LABEL = _n.UTT_PAD_LABEL  # label of padded frames: torch's ignore_index

# The last epoch a loader or sampler takes: its successor still fits the
# library's 64-bit epoch (a larger one would wrap to epoch 0's order).
MAX_EPOCH = 2**63 - 1


def _set_epoch(func, loader, epoch):
    """The one rule of set_epoch(e), for every loader and sampler that keeps
    a position (Loader, MixtureLoader, UtteranceSampler and so
    UtteranceBatchSampler and UtteranceLoader, MixtureUtteranceLoader):

    set_epoch(e) on a loader positioned in epoch e keeps its position; any
    other epoch starts at its beginning.

    "Positioned in" is the epoch state_dict() reports: right after
    load_state_dict() of a state in epoch e, the loaded position (so a
    resumed run's `loader.set_epoch(epoch)` continues it); after a pass
    stopped mid-way in e (a break), where it stopped; after a complete pass
    of e (or one that stopped after the last batch, or before a dropped
    tail), the start of e + 1 -- set_epoch(e + 1) starts it, set_epoch(e)
    serves e again from its start.

    The rule is the library's (cxs_position_start, which the C loaders'
    set_epoch calls use too): asked here of the position state_dict()
    reports, (epoch, global position).

    loader: its epoch, _origin (global position where the epoch in
    progress starts) and _start (this rank's position from there), and
    _position() -> (epoch, global position) as state_dict() reports
    them."""
    epoch = _a.integer(f"{func}.set_epoch", "epoch", epoch, 0, MAX_EPOCH)
    at, g = loader._position()
    if _lib.cxs_position_start(byref(_n.Position(_n.POSITION_VERSION, 0, at, g)), epoch):
        return  # kept: positioned in `epoch`, past its start
    # (positioned at the start of `epoch` while loader.epoch is the one
    # before: that one was served to its end)
    loader.epoch, loader._origin, loader._start = epoch, 0, 0


def _follow(loader, position, ptr, what):
    """After a batch of C loader `ptr` was handed out (or its pass ended):
    the Python loader stands where the C loader says (`position`, its
    cxs_*_position call): this rank's start of the next batch in the epoch
    in progress, or the start of the next epoch once the last batch of
    this one was handed out (a dropped tail included)."""
    at = _n.Position()
    rc = position(ptr, byref(at))
    if rc:
        _raise(rc, what=what)
    if at.epoch == loader.epoch:
        loader._start = at.next
    else:
        loader.epoch, loader._origin, loader._start = at.epoch, 0, 0


class _Order:
    """A C utterance sampler (freed with the object)."""

    def __init__(self, ds, opts, func="UtteranceSampler"):
        self.ds = ds  # kept alive: the sampler points into it
        ptr, diag = c_void_p(), _n.Diag()
        rc = _lib.cxs_utt_sampler_create(ds._ptr, byref(opts), byref(ptr), byref(diag))
        if rc == _n.E_RANGE and diag.message:
            # a budget an utterance does not fit: a wrong argument, said
            # with the Python spelling of the options
            msg = diag.message.decode("utf-8", "replace")
            msg = msg.replace("(long_alone)", '(long_utterances="alone")')
            if msg.startswith("utterance sampler: "):
                msg = f"{func}: " + msg[len("utterance sampler: "):]
            raise ValueError(msg)
        if rc:
            _raise(rc, diag)
        self.ptr = ptr
        self.origin = opts.origin
        self.max_batch = _lib.cxs_utt_sampler_max_batch(ptr)
        self.max_frames = _lib.cxs_utt_sampler_max_frames(ptr)

    def lengths(self, epoch):
        """(global batches, this rank's batches) of epoch."""
        g, n = c_uint64(), c_uint64()
        rc = _lib.cxs_utt_sampler_length(self.ptr, epoch, byref(g), byref(n))
        if rc:
            _raise(rc, what="utterance sampler")
        return g.value, n.value

    def batch(self, epoch, pos, buf):
        n, g = c_uint32(), c_uint64()
        rc = _lib.cxs_utt_sampler_batch(self.ptr, epoch, pos, buf.ctypes.data, len(buf),
                                        byref(n), byref(g))
        if rc:
            _raise(rc, what="utterance sampler")
        return buf[:n.value].copy(), g.value

    def __del__(self):
        if getattr(self, "ptr", None):
            _lib.cxs_utt_sampler_free(self.ptr)
            self.ptr = None


def _dist_defaults(func, rank, world_size):
    """rank and world_size, from torch.distributed when initialised and not
    given; checked."""
    if world_size is not None:
        world_size = _a.integer(func, "world_size", world_size, 1, 2**32 - 1)
    if rank is None or world_size is None:
        try:
            import torch.distributed as dist
            on = dist.is_available() and dist.is_initialized()
        except ImportError:
            on = False
        if rank is not None and world_size is None and not on:
            raise ValueError(f"{func}: rank={_a._show(rank)} without world_size: give "
                             "world_size= too (the number of ranks), or initialise "
                             "torch.distributed, which tells both")
        if on:
            world_size = dist.get_world_size() if world_size is None else world_size
            rank = dist.get_rank() if rank is None else rank
    world_size = 1 if world_size is None else world_size
    rank = _a.integer(func, "rank", 0 if rank is None else rank, 0, world_size - 1,
                      f"0..world_size-1 = 0..{world_size - 1}")
    return rank, world_size


class UtteranceSampler:
    """Batches of whole utterances of a packed dataset, as arrays of
    utterance numbers (uint64), for this rank and the current epoch.

    frame_budget: padded frames a batch may hold (batch size * its longest
    utterance), required.  shuffle: True, a new grouping and batch order
    every epoch from seed; False, storage order (evaluation).  buckets:
    length buckets (1..1024; 1 is random batching; default: frames / (2 *
    frame_budget), between 1 and 32, so that every bucket holds about two
    full batches and its batches still change with the epoch; more buckets
    pad less).
    max_batch: utterances a batch may hold at most (default: no limit).
    long_utterances: "refuse" (default: an utterance longer than the
    budget is an error at creation, naming it) or "alone" (served in a
    batch of its own).  rank/world_size: batch g of the global order goes
    to rank g % world_size; every rank gets the same count: the last round
    is completed with the epoch's first batches (repeats), or with
    drop_last=True cut.  memory= (bytes or '2G') and blocks= (1..1024,
    default 8): block mode for data larger than memory -- batches are made
    within `blocks` blocks of whole utterances at a time (of memory /
    (blocks + 1) bytes each), so an epoch reads each block once.

    Usable as a DataLoader's batch_sampler.  A complete pass advances the
    epoch; set_epoch(e) chooses one, and keeps the position when the
    sampler is already positioned in e (right after load_state_dict() of a
    state in e: a resumed run's set_epoch continues it).  state_dict() is
    (seed, epoch, global_position) with what fixes the order;
    load_state_dict() resumes there, also on another number of ranks."""

    _FUNC = "UtteranceSampler"

    def __init__(self, dataset, frame_budget, shuffle=True, seed=0, rank=None, world_size=None,
                 drop_last=False, buckets=None, max_batch=None, long_utterances="refuse",
                 memory=None, blocks=None):
        f = self._FUNC
        if not isinstance(dataset, Dataset):
            dataset = Dataset(_a.path(f, "dataset", dataset))
        self.dataset = dataset
        self.frame_budget = _a.integer(f, "frame_budget", frame_budget, 1, 2**63 - 1)
        self.shuffle = _a.flag(f, "shuffle", shuffle)
        self.seed = _a.integer(f, "seed", seed, 0, 2**64 - 1)
        self.drop_last = _a.flag(f, "drop_last", drop_last)
        self.buckets = _a.optional_integer(f, "buckets", buckets, 1, 1024)
        self.max_batch = _a.optional_integer(f, "max_batch", max_batch, 1, 2**32 - 1)
        self.long_utterances = _a.choice(f, "long_utterances", long_utterances,
                                         ("refuse", "alone"))
        if memory is not None:
            if not self.shuffle:
                raise ValueError(f"{f}: memory= (block mode) needs shuffle=True: in order, "
                                 "the data is read once sequentially anyway")
            memory = _a.size(f, "memory", memory)
            blocks = _a.optional_integer(f, "blocks", blocks, 1, 1024)
        elif blocks is not None:
            raise ValueError(f"{f}: blocks= applies with memory= (block mode) only")
        self.memory, self.blocks = memory, blocks
        self.rank, self.world_size = _dist_defaults(f, rank, world_size)
        self.epoch = 0
        self._origin = 0   # global position where the epoch in progress starts
        self._start = 0    # this rank's position in it
        self._orders = {}  # origin -> _Order
        self._buf = None
        self._order(0)  # the library's refusals (a budget below an utterance) now

    def _opts(self, origin):
        return _n.UttSamplerOpts(
            _n.UTT_SHUFFLE if self.shuffle else _n.UTT_SEQUENTIAL, self.seed, self.frame_budget,
            self.max_batch or 0, self.buckets or 0, int(self.long_utterances == "alone"),
            self.rank, self.world_size, int(self.drop_last), origin, self.memory or 0,
            self.blocks or 0)

    def _order(self, origin=None):
        origin = self._origin if origin is None else origin
        o = self._orders.get(origin)
        if o is None:
            if len(self._orders) > 2:
                self._orders = {k: v for k, v in self._orders.items() if k == 0}
            o = self._orders[origin] = _Order(self.dataset, self._opts(origin), self._FUNC)
        return o

    def __len__(self):
        """Batches of this rank in the epoch in progress (the remainder of a
        resumed one counted from its start)."""
        return self._order().lengths(self.epoch)[1]

    def global_batches(self, epoch=None):
        """The number of batches (an int) in the global order of epoch
        (default: the current one): all ranks' together, before the last
        round is completed or cut for equal counts.  batches() yields this
        rank's batches themselves."""
        e = self.epoch if epoch is None else _a.integer(
            f"{self._FUNC}.global_batches", "epoch", epoch, 0, MAX_EPOCH)
        return self._order(0).lengths(e)[0]

    def set_epoch(self, epoch):
        """Serve `epoch` next: kept where the sampler stands when it is
        positioned in that epoch (right after load_state_dict() of a state
        in it, or a pass stopped mid-way); any other epoch from its start.
        After a complete pass of e the sampler stands at the start of e + 1
        (set_epoch(e) then serves e again).  The rule of every loader:
        docs/python.md, "Epochs and resume"."""
        _set_epoch(self._FUNC, self, epoch)

    def batches(self):
        """(utterances, global index) of this rank's remaining batches."""
        o = self._order()
        n = o.lengths(self.epoch)[1]
        if self._buf is None or len(self._buf) < o.max_batch:
            self._buf = np.empty(o.max_batch, dtype=np.uint64)
        epoch = self.epoch
        while self._start < n:
            utts, g = o.batch(epoch, self._start, self._buf)
            self._start += 1
            yield utts, g
        self.epoch, self._origin, self._start = epoch + 1, 0, 0

    def __iter__(self):
        for utts, _ in self.batches():
            yield utts.tolist()

    def _position(self):
        """(epoch, global position) of the next batch, as state_dict()."""
        return self._global_position(self._start)

    def _global_position(self, position):
        g = self._origin + position * self.world_size
        total = self.global_batches()
        if g >= total or (self.drop_last and total - g < self.world_size):
            return self.epoch + 1, 0
        return self.epoch, g

    def state_dict(self, position=None):
        """seed, epoch, global_position (batches of the epoch's global order
        served by all ranks together) and what fixes the order.  position:
        this rank's batches consumed in the epoch when it differs from what
        the sampler has handed out (a DataLoader with workers fetches ahead:
        pass the count of batches your loop has taken)."""
        start = self._start if position is None else _a.integer(
            f"{self._FUNC}.state_dict", "position", position, 0, None)
        epoch, g = self._global_position(start)
        return {"seed": self.seed, "epoch": epoch, "global_position": g,
                "sampler": "utterance", "frame_budget": self.frame_budget,
                "shuffle": self.shuffle, "buckets": self.buckets,
                "max_batch": self.max_batch or 0, "long_utterances": self.long_utterances,
                "memory": self.memory, "blocks": self.blocks if self.memory else None,
                "global_batches": self.global_batches(epoch),
                "position": start if epoch == self.epoch else 0, "rank": self.rank,
                "world_size": self.world_size}

    _FIXED = ("seed", "sampler", "frame_budget", "shuffle", "buckets", "max_batch",
              "long_utterances", "memory", "blocks")

    def load_state_dict(self, state):
        """Continue where state_dict() was taken, on this sampler's ranks:
        everything that fixes the order must match (seed, frame_budget,
        shuffle, buckets, max_batch, long_utterances, memory, blocks);
        world_size may differ.  Every rank loads the same state."""
        f = f"{self._FUNC}.load_state_dict"
        if not isinstance(state, collections.abc.Mapping):
            raise TypeError(f"{f}: state={_a._show(state)} is a {type(state).__name__}, "
                            "expected the dict that state_dict() returned")
        # everything that identifies the order is required: a state
        # stripped of it would load for any dataset and serve another order
        missing = [k for k in ("epoch", "global_position", "global_batches") + self._FIXED
                   if k not in state]
        if missing:
            raise ValueError(f"{f}: state lacks {', '.join(missing)}: expected the dict that "
                             "state_dict() returned")
        epoch = _a.integer(f, "state['epoch']", state["epoch"], 0, MAX_EPOCH)
        mine = self.state_dict()
        for key in self._FIXED:
            if state[key] != mine[key]:
                raise ValueError(f"{f}: {key} {state[key]!r} does not match this sampler's "
                                 f"{mine[key]!r}: the order would differ")
        total = self.global_batches(epoch)
        if state["global_batches"] != total:
            raise ValueError(f"{f}: global_batches {state['global_batches']!r} does not match "
                             f"the {total} batches of epoch {epoch} here: the state is of "
                             "another dataset or order")
        g = _a.integer(f, "state['global_position']", state["global_position"], 0, total,
                       f"0..global_batches = 0..{total}")
        if g >= total and epoch == MAX_EPOCH:
            raise ValueError(f"{f}: state['epoch'] = {epoch} is complete, and the next epoch "
                             f"is past the last one ({MAX_EPOCH})")
        if g >= total:
            epoch, g = epoch + 1, 0
        self.epoch, self._origin, self._start = epoch, g, 0


def _norm_args(func, ds, normalize, per_utterance):
    """flags and a Norm (or None) for normalize= and per_utterance=, and what
    must stay alive while it is used."""
    per_utterance = _a.flag(func, "per_utterance", per_utterance)
    mode, st = normalization(func, ds, normalize, stacklevel=4)
    flags = (_n.GATHER_NORMALIZE if mode is not None else 0) | \
        (_n.PAD_PER_UTTERANCE if per_utterance else 0)
    nrm = None
    if st is not None:
        mean, var = st
        dp = ctypes.POINTER(ctypes.c_double)
        nrm = _n.Norm(ds.dim, mean.ctypes.data_as(dp), var.ctypes.data_as(dp))
    return flags, nrm, st


def _dataset_and_utterances(f, dataset, utterances):
    """The Dataset (opened when given a path) and the utterance numbers as
    a uint64 array, checked."""
    ds = dataset if isinstance(dataset, Dataset) else Dataset(_a.path(f, "dataset", dataset))
    utts = np.ascontiguousarray(utterances)
    if utts.ndim != 1 or not (np.issubdtype(utts.dtype, np.integer) or utts.size == 0):
        raise TypeError(f"{f}: utterances must be a 1-D sequence of utterance numbers")
    if utts.size and (utts.min() < 0 or utts.max() >= ds.num_utterances):
        raise IndexError(f"{f}: utterance numbers must be in 0..{ds.num_utterances - 1} "
                         f"(the dataset has {ds.num_utterances} utterances)")
    return ds, utts.astype(np.uint64)


def pad_batch(dataset, utterances, normalize=False, per_utterance=False, labels=None):
    """(x float32 [B, Tmax, D] zero-padded, lengths int64 [B], y int64 [B,
    Tmax] with PAD_LABEL (-100) past each length, or None) of the given
    utterance numbers, assembled by the library (any stored dtype,
    compressed datasets too).  normalize: as ctxshard.Dataset.gather
    (normalize=train_ds for the training split's statistics);
    per_utterance=True: each utterance's own mean and variance per
    dimension (after normalize, when both).  labels: None (when the
    dataset has them), True or False."""
    f = "pad_batch"
    ds, utts = _dataset_and_utterances(f, dataset, utterances)
    want = _a.optional_flag(f, "labels", labels)
    if want and not ds.has_frame_labels:
        raise ValueError(f"{f}: labels=True, but {ds.path} has no per-frame labels "
                         + ("(label sequences only: pad_targets)" if ds.has_label_seqs
                            else "(features only)"))
    want = ds.has_frame_labels if want is None else want
    flags, nrm, _keep = _norm_args(f, ds, normalize, per_utterance)
    lengths = np.empty(len(utts), dtype=np.int64)
    for i, u in enumerate(utts):
        lengths[i] = ds.utterance_frames(int(u))[1]
    tmax = int(lengths.max()) if len(utts) else 0
    x = np.empty((len(utts), tmax, ds.dim), dtype=np.float32)
    y = np.empty((len(utts), tmax), dtype=np.int64) if want else None
    diag = _n.Diag()
    rc = _lib.cxs_dataset_pad_batch_ex(ds._ptr, utts.ctypes.data, len(utts), tmax, flags,
                                       byref(nrm) if nrm is not None else None, x.ctypes.data,
                                       lengths.ctypes.data,
                                       y.ctypes.data if y is not None else None, byref(diag))
    if rc:
        _raise(rc, diag, what=f)
    return x, lengths, y


def pad_targets(dataset, utterances):
    """(targets int64 [B, Lmax], target_lengths int64 [B]) of the given
    utterance numbers: their label sequences (vocabulary indices, the CTC
    targets) padded with PAD_LABEL (-100) past each length, Lmax the
    longest of them.  ValueError when the dataset has no label sequences
    (has_label_seqs)."""
    f = "pad_targets"
    ds, utts = _dataset_and_utterances(f, dataset, utterances)
    if not ds.has_label_seqs:
        raise ValueError(f"{f}: {ds.path} has no label sequences (pack it with --transcripts "
                         "sequence or both)")
    lengths = np.empty(len(utts), dtype=np.int64)
    targets = np.empty((len(utts), ds.max_seq_length), dtype=np.int64)
    rc = _lib.cxs_dataset_pad_targets(ds._ptr, utts.ctypes.data, len(utts), ds.max_seq_length,
                                      targets.ctypes.data, lengths.ctypes.data)
    if rc:
        _raise(rc, what=f)
    return np.ascontiguousarray(targets[:, :int(lengths.max()) if len(utts) else 0]), lengths
