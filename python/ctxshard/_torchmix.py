"""The mixtures' torch loaders (MixtureLoader, MixtureUtteranceLoader) over
ctxshard.mixture's handles; ctxshard.torch re-exports them, and Loader and
UtteranceLoader given a list of datasets make them."""
import ctypes

import torch

from . import _args as _a, _native as _n
from . import utterances as _u
from ._native import lib as _lib
from ._loaders import _opened, _served
from ._torchbase import _copied, _device, _ints, _padded
from .mixture import (Mixture, UtteranceMixture, _MixLoader, _every, _known, _mix_norm,
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


class MixtureLoader(_MixLoader):
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

    def _loader_check(self):
        """Create (and free) one native loader now, so that what only the
        library checks (vocabularies by symbol, statistics) fails here."""
        ptr = self._create(self.sampler, 0, 0)
        _lib.cxs_mix_loader_free(ptr)


    def _mix_now(self):
        if not self._origin:
            return self.sampler
        m = self._origin_mix
        if m is None or m.origin != self._origin:
            m = self._origin_mix = Mixture(self.datasets, origin=self._origin, **self._mix_args)
        return m

    def __len__(self):
        return len(self._mix_now()) - self._start

    def set_epoch(self, epoch):
        """Serve `epoch` next, kept where the loader stands when it is
        positioned in it (Loader.set_epoch's rule)."""
        _u._set_epoch("Loader", self, epoch)

    def _position(self):
        """(epoch, global position) of the next batch, as state_dict()."""
        g = self._origin + self._start * self.world_size
        if self._epoch_done(g):
            return self.epoch + 1, 0
        return self.epoch, g

    def state_dict(self):
        """seed, epoch and global_position (global batches served by all
        ranks together), with what fixes the order: the datasets (paths and
        identities), shares, quotas, epoch_size, batch_size, shuffle and the
        normalisation (none, per-source or given)."""
        epoch, g = self._position()
        m = self.sampler
        return {"kind": "mixture", "seed": self.seed, "epoch": epoch, "global_position": g,
                "unit": "batches", "batch_size": self.batch_size,
                "sources": [d.path for d in self.datasets],
                "identities": [d.identity for d in self.datasets],
                "shares": list(m.shares), "quotas": list(m.quotas),
                "epoch_size": m.epoch_size, "shuffle": m.shuffle, "drop_last": m.drop_last,
                "memory": m.memory, "blocks": m.blocks, "normalization": self.normalization}

    def _order_batches(self):
        """The global batches of an epoch's order whatever the ranks (the
        short last one cut with drop_last; a last round of fewer batches
        than ranks is cut then too, which depends on the ranks)."""
        E, B = self.sampler.epoch_size, self.batch_size
        return E // B + (0 if self.drop_last else int(E % B != 0))

    def _epoch_done(self, g):
        N = self._order_batches()
        return g >= N or (self.drop_last and N - g < self.world_size)

    def load_state_dict(self, state):
        f = "Loader.load_state_dict"
        self._same_order(f, state, "mixture", "a mixture's",
                         ("seed", "batch_size", "identities", "quotas", "epoch_size", "shuffle",
                          "drop_last", "memory", "blocks"))
        if state.get("normalization") != self.normalization:
            raise ValueError(f"{f}: the state was normalised {state.get('normalization')!r}, "
                             f"this loader {self.normalization!r}")
        g = _a.integer(f, "global_position", state.get("global_position"), 0,
                       self._order_batches())
        epoch = _a.integer(f, "epoch", state.get("epoch"), 0, _u.MAX_EPOCH)
        if self._epoch_done(g):  # (on these ranks, what is left of it is cut)
            epoch, g = epoch + 1, 0
        self.epoch, self._origin, self._start = epoch, g, 0

    def _create(self, mix, epoch, start):
        opts = _n.LoaderOpts(self.context, self.batch_size, self.threads or 0, 0,
                             _n.GATHER_NORMALIZE if self.normalization != "none" else 0, 0,
                             int(self.labels), 0)
        _mix_norm(opts, self._norm_stats, self.datasets[0].dim)
        return _opened(_lib.cxs_mix_loader_create, "mixture loader", mix._ptr,
                       ctypes.byref(opts), epoch, start)

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




class MixtureUtteranceLoader(_MixLoader):
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


    def _mix_now(self):
        m = self._mixes.get(self._origin)
        if m is None:
            if len(self._mixes) > 2:
                self._mixes = {0: self.sampler}
            m = self._mixes[self._origin] = UtteranceMixture(self.datasets, origin=self._origin,
                                                             **self._mix_args)
        return m

    def global_batches(self, epoch=None):
        """The batches of epoch's global order (default: the current one)."""
        e = self.epoch if epoch is None else _a.integer(
            "UtteranceLoader.global_batches", "epoch", epoch, 0, _u.MAX_EPOCH)
        return self.sampler.lengths(e)[0]

    def __len__(self):
        return self._mix_now().lengths(self.epoch)[1] - self._start

    def set_epoch(self, epoch):
        """Serve `epoch` next, kept where the loader stands when it is
        positioned in it (Loader.set_epoch's rule)."""
        _u._set_epoch("UtteranceLoader", self, epoch)

    def _position(self):
        """(epoch, global position) of the next batch, as state_dict()."""
        g = self._origin + self._start * self.world_size
        total = self.global_batches(self.epoch)
        if g >= total or (self.drop_last and total - g < self.world_size):
            return self.epoch + 1, 0
        return self.epoch, g

    def state_dict(self):
        """seed, epoch and global_position (global batches served by all
        ranks together), with what fixes the order: the datasets (paths and
        identities), shares, quotas, epoch_size, frame_budget, buckets,
        max_batch, long_utterances, shuffle, memory and blocks, drop_last,
        the epoch's global batches and the normalisation (none, per-source
        or given)."""
        epoch, g = self._position()
        m = self.sampler
        return {"kind": "utterance-mixture", "seed": self.seed, "epoch": epoch,
                "global_position": g, "unit": "batches",
                "global_batches": self.global_batches(epoch),
                "sources": [d.path for d in self.datasets],
                "identities": [d.identity for d in self.datasets],
                "shares": list(m.shares), "quotas": list(m.quotas),
                "epoch_size": m.epoch_size, "frame_budget": m.frame_budget,
                "buckets": m.buckets, "max_batch": m.max_batch or 0,
                "long_utterances": m.long_utterances, "stratify": m.stratify,
                "shuffle": m.shuffle, "memory": m.memory, "blocks": m.blocks,
                "drop_last": m.drop_last, "normalization": self.normalization,
                "per_utterance": self.per_utterance}

    _FIXED = ("seed", "identities", "quotas", "epoch_size", "frame_budget", "buckets",
              "max_batch", "long_utterances", "stratify", "shuffle", "memory", "blocks",
              "drop_last", "normalization", "per_utterance")

    def load_state_dict(self, state):
        f = "UtteranceLoader.load_state_dict"
        self._same_order(f, state, "utterance-mixture", "an utterance mixture's", self._FIXED)
        epoch = _a.integer(f, "epoch", state.get("epoch"), 0, _u.MAX_EPOCH)
        total = self.global_batches(epoch)
        if state.get("global_batches") != total:
            raise ValueError(f"{f}: global_batches {state.get('global_batches')!r} is not the "
                             f"{total} batches of epoch {epoch} here: another order")
        g = _a.integer(f, "global_position", state.get("global_position"), 0, total)
        if g >= total or (self.drop_last and total - g < self.world_size):
            epoch, g = epoch + 1, 0  # (on these ranks, what is left of it is cut)
        self.epoch, self._origin, self._start = epoch, g, 0

    def _create(self, mix, epoch, start):
        flags = (_n.GATHER_NORMALIZE if self.normalization != "none" else 0) | \
            (_n.PAD_PER_UTTERANCE if self.per_utterance else 0)
        opts = _n.UttLoaderOpts(self.threads or 0, 0, flags, int(self.labels), None, 0,
                                int(self.targets))
        _mix_norm(opts, self._norm_stats, self.datasets[0].dim)
        return _opened(_lib.cxs_mix_utt_loader_create, "utterance mixture loader", mix._ptr,
                       ctypes.byref(opts), epoch, start)

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
