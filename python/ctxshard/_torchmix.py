"""The mixtures' torch loaders (MixtureLoader, MixtureUtteranceLoader) over
ctxshard.mixture's handles; ctxshard.torch re-exports them, and Loader and
UtteranceLoader given a list of datasets make them."""
import ctypes

import torch

from . import _args as _a, _native as _n
from . import utterances as _u
from ._native import lib as _lib
from ._loaders import _served
from ._torchbase import _copied, _device, _ints, _padded
from .mixture import (Mixture, UtteranceMixture, _MixFrameOrder, _MixUttOrder, _every, _known,
                      _mix_normalization, _same_width, _sources)


class MixedBatch(tuple):
    """A mixture's batch: (x, y) as the frame Loader yields them, or (x,)
    with labels=False, with .source (int64 [n]: which dataset, by its place
    in the list, each sample came from), .frames (int64 [n]: its frame
    number in that dataset) and .repeat (True for the final round's
    padding: a batch that repeats one of the first round, so that every
    rank has as many; leave it out of an evaluation)."""

    def __new__(cls, parts, source, frames, repeat=False):
        t = super().__new__(cls, parts)
        t.source, t.frames, t.repeat = source, frames, repeat
        return t


class MixtureLoader(_MixFrameOrder):
    """Batches of windows from several datasets in fixed shares (what
    Loader([a, b, ...], context, batch_size, ...) returns).  The shares,
    quotas, passes and ranks are ctxshard.Mixture's: weights (one per
    dataset, or None: the natural shares), temperature, epoch_size (samples
    per epoch, default the sum of the frames).  Each batch is a MixedBatch:
    (x, y) tensors, x float32 [n, (2k+1)*D], y int64 [n] labels in the
    first dataset's vocabulary (another dataset's labels are mapped by
    symbol; vocabularies that differ are refused, naming the symbols), with
    .source (int64 [n]) saying which dataset each sample came from.

    The datasets must have the same feature width; their stored dtypes may
    differ.  normalize=True normalises each dataset with its own stored
    statistics; a Dataset, its .stats or (mean, var) normalises every one
    with that one set (state_dict says which).  Batches are fresh tensors,
    yours to keep.  rank/world_size as for Loader (from torch.distributed
    when initialised): rank r takes global batches r, r + world_size, ...
    state_dict() is (seed, epoch, global_position) with global_position in
    global batches; load_state_dict() resumes there, also on another number
    of ranks, nothing repeated or lost, and set_epoch(e) right after it
    keeps that position (Loader's rule).  shuffle="block" with memory= (and
    blocks=): data larger than memory, each dataset's passes in block order
    within its share of the one budget, its blocks asked for ahead and let
    go once passed.  On the CPU only: device= copies each batch to the
    device (no GPU path yet); streaming and weighted sampling are not
    available for mixtures."""

    def __init__(self, paths, context, batch_size, shuffle=True, seed=0, drop_last=False,
                 weights=None, temperature=None, epoch_size=None, rank=None, world_size=None,
                 threads=None, normalize=False, labels=None, device=None, pin_memory=False,
                 memory=None, blocks=None, **unsupported):
        f = "Loader"
        from .torch import Loader  # (which imports this module)
        _known(f, Loader.__init__, unsupported)
        for k, v in unsupported.items():
            if v is not None and v is not False and v != "auto" and v != 0:
                raise ValueError(f"{f}: {k}= is not available for a mixture of datasets (a "
                                 "list of paths): the mixture loader serves host batches, "
                                 "shuffled, in order or in block order")
        if isinstance(shuffle, str) and shuffle != "block":
            raise ValueError(f"{f}: shuffle={shuffle!r}: a mixture is shuffled (True), in "
                             "order (False) or in block order ('block', with memory=)")
        self.datasets = _sources(f, paths)
        self.context = _a.integer(f, "context", context, 0, 1000000)
        self.batch_size = _a.integer(f, "batch_size", batch_size, 1, 2**31 - 1)
        self.threads = _a.optional_integer(f, "threads", threads, 1, 256)
        self.device = _device(f, device)
        self.pin_memory = _a.flag(f, "pin_memory", pin_memory) and torch.cuda.is_available()
        d0 = self.datasets[0]
        _same_width(f, self.datasets)
        self.labels = _every(f, self.datasets, "labels", labels, "has_frame_labels",
                             "per-frame labels")
        self.normalization, self._norm_stats = _mix_normalization(f, self.datasets, normalize)
        if rank is None or world_size is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized():
                rank = dist.get_rank() if rank is None else rank
                world_size = dist.get_world_size() if world_size is None else world_size
        self.world_size = _a.integer(f, "world_size", 1 if world_size is None else world_size,
                                     1, 2**32 - 1)
        self.rank = _a.integer(f, "rank", 0 if rank is None else rank, 0, self.world_size - 1)
        self.input_size = d0.input_size(self.context)
        self._mix_args = dict(batch_size=self.batch_size, weights=weights,
                              temperature=temperature, epoch_size=epoch_size,
                              shuffle="block" if shuffle == "block"
                              else _a.flag(f, "shuffle", shuffle),
                              seed=_a.integer(f, "seed", seed, 0, 2**64 - 1), rank=self.rank,
                              world_size=self.world_size,
                              drop_last=_a.flag(f, "drop_last", drop_last), memory=memory,
                              blocks=blocks)
        self.sampler = Mixture(self.datasets, **self._mix_args)
        self._origin_mix = None
        self.seed, self.drop_last = self._mix_args["seed"], self._mix_args["drop_last"]
        self.epoch, self._start, self._origin = 0, 0, 0
        self.source_index = {d.path: i for i, d in enumerate(self.datasets)}
        self._loader_check()

    def __iter__(self):
        ptr = self._create(self._mix_now(), self.epoch, self._start)
        pin = self.pin_memory

        def convert(b):
            n = b.n
            x = _copied(b.x, (n, self.input_size), torch.float32, pin)
            y = _copied(b.y, (n,), torch.int64, pin) if self.labels else None
            src = _ints(b.source, n, ctypes.c_uint32)
            if self.device is not None:
                x = x.to(self.device, non_blocking=True)
                y = y.to(self.device, non_blocking=True) if y is not None else None
                src = src.to(self.device, non_blocking=True)
            return MixedBatch((x, y) if y is not None else (x,), src,
                              _ints(b.frames, n, ctypes.c_uint64), bool(b.repeat))

        yield from _served(self, ptr, "mix_loader", _n.MixFrames, "mixture loader", convert)


class MixedUtterances(tuple):
    """A mixture's padded batch: the tuple UtteranceLoader yields ((x,
    lengths), then y, then targets and target_lengths), with .source (int64
    [B]: which dataset, by its place in the list, each utterance came
    from), .utterances (int64 [B]: its number in that dataset) and .repeat
    (True for the final round's padding, a batch of the epoch's first ones
    again so that every rank has as many; leave it out of an
    evaluation)."""

    def __new__(cls, parts, source, utterances, repeat=False):
        t = super().__new__(cls, parts)
        t.source, t.utterances, t.repeat = source, utterances, repeat
        return t


class MixtureUtteranceLoader(_MixUttOrder):
    """Padded batches of whole utterances from several datasets in fixed
    shares (what UtteranceLoader([a, b, ...], frame_budget, ...) returns).
    The shares, quotas, passes, buckets and ranks are
    ctxshard.UtteranceMixture's: weights (one per dataset, or None: the
    natural shares, by utterance count), temperature, epoch_size
    (utterances per epoch, default the sum), frame_budget, buckets,
    max_batch, long_utterances, stratify ("shares": every batch holds the
    shares; "length": pads least), shuffle, seed, drop_last.  Each batch is a
    MixedUtterances: the tuple UtteranceLoader yields (x float32 [B, Tmax,
    D], lengths, then y int64 [B, Tmax] and targets/target_lengths when
    every dataset has them, labels in the first dataset's vocabulary:
    another's are mapped by symbol, vocabularies that differ refused naming
    the symbols), with .source (int64 [B]) saying which dataset each
    utterance came from.

    The datasets must have the same feature width; their stored dtypes may
    differ.  normalize=True normalises each dataset with its own stored
    statistics, a Dataset / its .stats / (mean, var) all with that one set
    (state_dict says which); per_utterance as UtteranceLoader's.  rank and
    world_size from torch.distributed when initialised.  state_dict() is
    (seed, epoch, global_position) with global_position in global batches;
    load_state_dict() resumes there, also on another number of ranks,
    nothing repeated or lost, and set_epoch(e) right after it keeps that
    position (Loader's rule).  batch_info after each batch as
    UtteranceLoader's (utterances, sources, global, index, frames).
    memory= (and blocks=): block order, for data larger than memory, within
    that one page-cache budget for all the datasets (UtteranceMixture's);
    the loader asks the kernel for each dataset's next group of blocks as
    the batches reach it and lets a group go once the batches have passed
    it.  On the CPU only: device= copies each batch (lengths stay on the
    CPU); streaming a URL and the GPU path are not available for
    mixtures."""

    def __init__(self, paths, frame_budget, shuffle=True, seed=0, rank=None, world_size=None,
                 threads=None, drop_last=False, buckets=None, max_batch=None,
                 long_utterances="refuse", normalize=False, per_utterance=False, labels=None,
                 targets=None, weights=None, temperature=None, epoch_size=None,
                 stratify="shares", device=None, memory=None, blocks=None, **unsupported):
        f = "UtteranceLoader"
        from ._torchutt import UtteranceLoader  # (which imports this module)
        _known(f, UtteranceLoader.__init__, unsupported)
        for k, v in unsupported.items():
            if v is not None and v is not False and v != 0:
                raise ValueError(f"{f}: {k}= is not available for a mixture of datasets (a "
                                 "list of paths): the utterance mixture loader serves host "
                                 "batches, shuffled by length bucket or in order")
        self.datasets = _sources(f, paths)
        _same_width(f, self.datasets)
        self.threads = _a.optional_integer(f, "threads", threads, 1, 256)
        self.per_utterance = _a.flag(f, "per_utterance", per_utterance)
        self.device = _device(f, device)
        self.labels = _every(f, self.datasets, "labels", labels, "has_frame_labels",
                             "per-frame labels")
        self.targets = _every(f, self.datasets, "targets", targets, "has_label_seqs",
                              "label sequences")
        self.normalization, self._norm_stats = _mix_normalization(f, self.datasets, normalize)
        rank, world_size = _u._dist_defaults(f, rank, world_size)
        self.rank, self.world_size = rank, world_size
        self._mix_args = dict(frame_budget=frame_budget, weights=weights,
                              temperature=temperature, epoch_size=epoch_size,
                              shuffle=_a.flag(f, "shuffle", shuffle),
                              seed=_a.integer(f, "seed", seed, 0, 2**64 - 1), rank=rank,
                              world_size=world_size, drop_last=_a.flag(f, "drop_last", drop_last),
                              buckets=buckets, max_batch=max_batch,
                              long_utterances=long_utterances, stratify=stratify,
                              memory=memory, blocks=blocks)
        self.sampler = UtteranceMixture(self.datasets, **self._mix_args)
        self._mixes = {0: self.sampler}
        self.seed, self.drop_last = self.sampler.seed, self.sampler.drop_last
        self.epoch, self._start, self._origin = 0, 0, 0
        self.input_size = self.datasets[0].dim
        self.num_classes = self.datasets[0].num_classes
        self.batch_info = None
        ptr = self._create(self.sampler, 0, 0)  # what only the library checks fails now
        _lib.cxs_mix_utt_loader_free(ptr)

    def __iter__(self):
        ptr = self._create(self._mix_now(), self.epoch, self._start)

        def convert(mb):
            b = mb.batch.contents
            src, utts = _ints(mb.source, b.n, ctypes.c_uint32), _ints(b.utts, b.n, ctypes.c_uint64)
            self.batch_info = {"utterances": utts.numpy().copy(), "sources": src.numpy().copy(),
                               "global": getattr(b, "global"), "index": b.index,
                               "frames": b.frames}
            out = _padded(b, self.input_size, self.device)
            if self.device is not None:
                src = src.to(self.device, non_blocking=True)
            return MixedUtterances(tuple(out), src, utts, bool(mb.repeat))

        yield from _served(self, ptr, "mix_utt_loader", _n.MixUtts, "utterance mixture loader",
                           convert)
