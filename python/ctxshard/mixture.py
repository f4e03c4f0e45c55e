"""Mixtures of datasets: several corpora in one run, in fixed shares.

Mixture is the sampler (numpy only): which frames of which source each
batch of an epoch holds, for any rank and epoch, as the C library's
cxs_mix computes it.  The torch loader over it is ctxshard.torch.Loader
given a list of datasets (MixtureLoader); what its loaders check and
keep without torch (the sources' widths, labels and normalisation, the
states' order checks) is here, at the end.  The rules (shares, quotas,
passes, strata, ranks, resume) are the guide's "Mixtures of datasets"."""
import ctypes

import numpy as np

from . import (BLOCK, SEQUENTIAL, SHUFFLE, Dataset, _args as _a, _native as _n, _raise,
               normalization)
from . import utterances as _u
from ._loaders import _opened
from ._native import lib as _lib

__all__ = ["Mixture", "UtteranceMixture"]


def _sources(func, datasets, **open_kw):
    """The sources as open Datasets (paths opened here), at least one."""
    if isinstance(datasets, (str, bytes, Dataset)) or not hasattr(datasets, "__iter__"):
        raise ValueError(f"{func}: datasets must be a list of datasets or paths, not "
                         f"{_a._show(datasets)}")
    out = []
    for i, d in enumerate(datasets):
        if isinstance(d, Dataset):
            out.append(d)
        else:
            out.append(Dataset(_a.path(func, f"datasets[{i}]", d), **open_kw))
    if not out:
        raise ValueError(f"{func}: no datasets given (a mixture needs at least one)")
    if len(out) > 256:
        raise ValueError(f"{func}: {len(out)} datasets (at most 256)")
    return out


def _share_args(f, weights, temperature, n):
    """weights (a float64 array, or None) and temperature (or None), checked."""
    w = None
    if weights is not None:
        try:
            w = np.asarray(weights, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{f}: weights must be numbers, one per dataset, not "
                             f"{_a._show(weights)}") from None
        if w.shape[0] != n:
            raise ValueError(f"{f}: {w.shape[0]} weights for {n} datasets (one each)")
        if temperature is not None:
            raise ValueError(f"{f}: weights= and temperature= exclude each other (a "
                             "temperature flattens the natural shares)")
        w = np.ascontiguousarray(w)
    if temperature is not None:
        try:
            temperature = float(temperature)
        except (TypeError, ValueError):
            raise ValueError(f"{f}: temperature must be a number above 0, not "
                             f"{_a._show(temperature)}") from None
        if not temperature > 0 or not np.isfinite(temperature):
            raise ValueError(f"{f}: temperature={temperature} (a number above 0; 1: the "
                             "natural shares)")
    return w, temperature


class _Handle:
    """A C mixture, freed with the object (or close())."""
    _FREE = None
    _MAX_RANKS = 2**32 - 1

    def close(self):
        if getattr(self, "_ptr", None):
            getattr(_lib, self._FREE)(self._ptr)
            self._ptr = None

    def __del__(self):
        self.close()

    def _create(self, f, create, o, what):
        """The C mixture from options o (the shares' and ranks' fields
        filled here); a budget refused (CXS_E_RANGE: a block or a batch an
        utterance does not fit) is a ValueError in this API's spelling."""
        o.temperature = 0.0 if self.temperature is None else self.temperature
        o.rank, o.world_size, o.drop_last, o.origin = (self.rank, self.world_size,
                                                       int(self.drop_last), self.origin)
        if self._weights is not None:
            o.weights = self._weights.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        n = len(self.datasets)
        arr = (ctypes.c_void_p * n)(*[d._ptr for d in self.datasets])
        self._handles = [d._h for d in self.datasets]  # the datasets outlive the mixture
        ptr, diag = ctypes.c_void_p(), _n.Diag()
        rc = create(arr, n, ctypes.byref(o), ctypes.byref(ptr), ctypes.byref(diag))
        if rc == _n.E_RANGE and diag.message:
            msg = diag.message.decode("utf-8", "replace").split(": ", 1)[-1]
            raise ValueError(f"{f}: " + msg.replace("memory_bytes", "memory=").replace(
                "(long_alone)", '(long_utterances="alone")'))
        if rc:
            _raise(rc, diag, what=what)
        self._ptr = ptr

    def _order_args(self, f, seed, rank, world_size, drop_last, origin):
        self.seed = _a.integer(f, "seed", seed, 0, 2**64 - 1)
        self.world_size = _a.integer(f, "world_size", world_size, 1, self._MAX_RANKS)
        self.rank = _a.integer(f, "rank", rank, 0, self.world_size - 1,
                               f"0..world_size-1 = 0..{self.world_size - 1}")
        self.drop_last = _a.flag(f, "drop_last", drop_last)
        self.origin = _a.integer(f, "origin", origin, 0, 2**64 - 1)


class Mixture(_Handle):
    """Batches of frames drawn from several datasets in fixed shares.

    datasets: Datasets or paths (opened here).  weights: one per source
    (>= 0, not all 0), or None for the natural shares (each source's frame
    count); temperature T (weights None): shares ~ frames^(1/T), T > 1
    flattening towards small sources.  epoch_size: samples per epoch (all
    ranks; default the sum of the sources' frames), of which source i gives
    exactly quotas[i].  A source smaller than its quota is repeated, a
    larger one subsampled; every source is read in passes (a seeded
    permutation each with shuffle=True, storage order with False), no frame
    twice within a pass, and the next epoch goes on where this one stopped.
    Every batch holds the shares to within about a sample; rank r of
    world_size takes global batches origin + r, + r + world_size, ...; over
    an epoch each rank gets each source's share to within about a sample.
    origin: the global batch where every epoch starts (resume).
    shuffle="block" with memory= (bytes or '2G') and blocks= (1..1024,
    default 8): data larger than memory -- each source's passes in block
    order (as the block sampler's), the budget shared among the sources in
    proportion to the bytes of rows each gives an epoch."""

    _FREE = "cxs_mix_free"

    def __init__(self, datasets, batch_size, weights=None, temperature=None, epoch_size=None,
                 shuffle=True, seed=0, rank=0, world_size=1, drop_last=False, origin=0,
                 memory=None, blocks=None):
        f = "Mixture"
        self.datasets = _sources(f, datasets)
        n = len(self.datasets)
        self.batch_size = _a.integer(f, "batch_size", batch_size, 1, 2**31 - 1)
        self._weights, self.temperature = _share_args(f, weights, temperature, n)
        if shuffle == "block":
            if memory is None:
                raise ValueError(f"{f}: shuffle='block' needs memory= (the page cache the "
                                 "sources may use together, e.g. '2G')")
            self.shuffle = "block"
            self.memory = _a.size(f, "memory", memory)
            self.blocks = _a.optional_integer(f, "blocks", blocks, 1, 1024)
        else:
            if memory is not None or blocks is not None:
                raise ValueError(f"{f}: memory= and blocks= apply with shuffle='block' only")
            self.shuffle = _a.flag(f, "shuffle", shuffle)
            self.memory = self.blocks = None
        self._order_args(f, seed, rank, world_size, drop_last, origin)
        esize = 0 if epoch_size is None else _a.integer(f, "epoch_size", epoch_size, 1, 2**62)
        o = _n.MixOpts()
        # each source's passes
        o.kind = BLOCK if self.shuffle == "block" else SHUFFLE if self.shuffle else SEQUENTIAL
        o.memory_bytes, o.blocks = self.memory or 0, self.blocks or 0
        o.seed, o.batch_size, o.epoch_size = self.seed, self.batch_size, esize
        self._create(f, _lib.cxs_mix_create, o, "mixture")
        ptr = self._ptr
        self.epoch_size = int(_lib.cxs_mix_epoch_size(ptr))
        self.quotas = [int(_lib.cxs_mix_quota(ptr, i)) for i in range(n)]
        self.shares = [float(_lib.cxs_mix_share(ptr, i)) for i in range(n)]
        g = ctypes.c_uint64()
        self._length = int(_lib.cxs_mix_length(ptr, ctypes.byref(g)))
        self.global_batches = int(g.value)

    @property
    def weights(self):
        """The weights given (a list), or None for natural / temperature shares."""
        return None if self._weights is None else [float(x) for x in self._weights]

    def __len__(self):
        """This rank's batches per epoch (from origin)."""
        return self._length

    def batch(self, epoch, pos):
        """This rank's batch at position pos of epoch: (frames, sources,
        global): each sample's frame number in its own dataset (uint64),
        its source (uint32), and the batch's place in the global order."""
        epoch = _a.integer("Mixture.batch", "epoch", epoch, 0, 2**64 - 1)
        pos = _a.integer("Mixture.batch", "pos", pos, 0, 2**64 - 1)
        if pos >= self._length:
            raise IndexError(f"Mixture.batch: position {pos} is past this rank's "
                             f"{self._length} batches")
        f = np.empty(self.batch_size, np.uint64)
        s = np.empty(self.batch_size, np.uint32)
        n, g = ctypes.c_uint32(), ctypes.c_uint64()
        rc = _lib.cxs_mix_batch(self._ptr, epoch, pos, f.ctypes.data, s.ctypes.data,
                                self.batch_size, ctypes.byref(n), ctypes.byref(g))
        if rc:
            _raise(rc, what="mixture")
        return f[:n.value], s[:n.value], int(g.value)

    def repeat(self, pos):
        """Whether this rank's batch at pos repeats one of the run's first
        round (the final round's padding for ranks past the last batch)."""
        return bool(_lib.cxs_mix_repeat(self._ptr, _a.integer("Mixture.repeat", "pos", pos, 0,
                                                               2**64 - 1)))


class UtteranceMixture(_Handle):
    """Length-bucketed batches of whole utterances drawn from several
    datasets in fixed shares (the C library's cxs_mix_utt), as utterance
    numbers with their sources.

    datasets, weights, temperature: as Mixture's, the shares counted in
    utterances (natural: each source's utterance count).  epoch_size:
    utterances per epoch (all ranks; default the sum of the sources'), of
    which source i gives exactly quotas[i], read in passes as Mixture's
    sources are.  frame_budget, buckets, max_batch, long_utterances:
    as UtteranceSampler's.  With shuffle=True the epoch's utterances go
    into length buckets; inside a bucket the sources are interleaved in
    proportion to their counts in it and cut under the budget; the batches
    are shuffled.  stratify="shares" (default): bucket b holds every
    source's b-th length quantile of its own utterances, so every batch
    holds the mixture's shares to within about an utterance (a source of
    shorter utterances is padded to the other's lengths in a batch);
    stratify="length": buckets by length over the whole mixture, which pads
    least, each batch holding its bucket's shares (more of the source with
    long utterances in the long buckets).  The same when the sources'
    lengths are alike.  shuffle=False: one bucket, in order.  memory= (bytes
    or '2G', shuffle=True only) and blocks= (1..1024, default 8): block
    order, for data larger than memory -- every source read in groups of
    blocks of its block schedule within its share of the one budget (the
    bytes its quota reads an epoch), the epoch cut into windows of about
    half a group of every source, the steps above run inside each window
    and the windows in order.  The ranks take the global batches in rounds
    of world_size from origin, which rank which chosen so that each keeps
    to its shares of what it serves (ctxshard.h); every rank the same
    count (the last round completed with the epoch's first batches, the
    batch's repeat flag says which, or with drop_last cut).  origin: the
    global batch where every epoch starts (resume)."""

    _FREE = "cxs_mix_utt_free"
    _MAX_RANKS = 2**20

    def __init__(self, datasets, frame_budget, weights=None, temperature=None, epoch_size=None,
                 shuffle=True, seed=0, rank=0, world_size=1, drop_last=False, origin=0,
                 buckets=None, max_batch=None, long_utterances="refuse", stratify="shares",
                 memory=None, blocks=None):
        f = "UtteranceMixture"
        self.datasets = _sources(f, datasets)
        n = len(self.datasets)
        self.frame_budget = _a.integer(f, "frame_budget", frame_budget, 1, 2**63 - 1)
        self._weights, self.temperature = _share_args(f, weights, temperature, n)
        self.shuffle = _a.flag(f, "shuffle", shuffle)
        self._order_args(f, seed, rank, world_size, drop_last, origin)
        self.buckets = _a.optional_integer(f, "buckets", buckets, 1, 1024)
        self.max_batch = _a.optional_integer(f, "max_batch", max_batch, 1, 2**32 - 1)
        self.long_utterances = _a.choice(f, "long_utterances", long_utterances,
                                         ("refuse", "alone"))
        self.stratify = _a.choice(f, "stratify", stratify, ("shares", "length"))
        self.memory = None if memory is None else _a.size(f, "memory", memory)
        self.blocks = _a.optional_integer(f, "blocks", blocks, 1, 1024)
        if self.memory is not None and not self.shuffle:
            raise ValueError(f"{f}: memory= (block order) needs shuffle=True")
        if self.blocks is not None and self.memory is None:
            raise ValueError(f"{f}: blocks= applies with memory= (block order) only")
        esize = 0 if epoch_size is None else _a.integer(f, "epoch_size", epoch_size, 1, 2**40)
        o = _n.MixUttOpts()
        o.kind = _n.UTT_SHUFFLE if self.shuffle else _n.UTT_SEQUENTIAL
        o.seed, o.frame_budget, o.epoch_size = self.seed, self.frame_budget, esize
        o.max_batch, o.buckets = self.max_batch or 0, self.buckets or 0
        o.long_alone = int(self.long_utterances == "alone")
        o.stratify = _n.MIX_STRATIFY_LENGTH if self.stratify == "length" else \
            _n.MIX_STRATIFY_SHARES
        o.memory_bytes, o.blocks = self.memory or 0, self.blocks or 0
        self._create(f, _lib.cxs_mix_utt_create, o, "utterance mixture")
        ptr = self._ptr
        self.epoch_size = int(_lib.cxs_mix_utt_epoch_size(ptr))
        self.quotas = [int(_lib.cxs_mix_utt_quota(ptr, i)) for i in range(n)]
        self.shares = [float(_lib.cxs_mix_utt_share(ptr, i)) for i in range(n)]
        self.max_batch_size = int(_lib.cxs_mix_utt_max_batch(ptr))
        self.max_frames = int(_lib.cxs_mix_utt_max_frames(ptr))

    @property
    def weights(self):
        """The weights given (a list), or None for natural / temperature shares."""
        return None if self._weights is None else [float(x) for x in self._weights]

    def lengths(self, epoch):
        """(global batches, this rank's batches) of epoch (they change with
        the epoch: the batches are cut from its utterances)."""
        epoch = _a.integer("UtteranceMixture.lengths", "epoch", epoch, 0, 2**64 - 1)
        g, n = ctypes.c_uint64(), ctypes.c_uint64()
        rc = _lib.cxs_mix_utt_length(self._ptr, epoch, ctypes.byref(g), ctypes.byref(n))
        if rc:
            _raise(rc, what="utterance mixture")
        return int(g.value), int(n.value)

    def batch(self, epoch, pos):
        """This rank's batch at position pos of epoch: (utterances, sources,
        global, repeat): each utterance's number in its own dataset
        (uint64), its source (uint32), the batch's place in the global
        order, and whether it is the final round's padding."""
        epoch = _a.integer("UtteranceMixture.batch", "epoch", epoch, 0, 2**64 - 1)
        pos = _a.integer("UtteranceMixture.batch", "pos", pos, 0, 2**64 - 1)
        cap = self.max_batch_size
        u = np.empty(cap, np.uint64)
        s = np.empty(cap, np.uint32)
        n, g, r = ctypes.c_uint32(), ctypes.c_uint64(), ctypes.c_uint32()
        rc = _lib.cxs_mix_utt_batch(self._ptr, epoch, pos, u.ctypes.data, s.ctypes.data, cap,
                                    ctypes.byref(n), ctypes.byref(g), ctypes.byref(r))
        if rc == _n.E_RANGE:
            raise IndexError(f"UtteranceMixture.batch: position {pos} is past this rank's "
                             f"{self.lengths(epoch)[1]} batches of epoch {epoch}")
        if rc:
            _raise(rc, what="utterance mixture")
        return u[:n.value], s[:n.value], int(g.value), bool(r.value)


def _known(f, init, given):
    """A misspelt keyword is a TypeError, as for any function: a mixture
    refuses the single loader's options it cannot serve, and only those."""
    import inspect
    names = inspect.signature(init).parameters
    for k in given:
        if k not in names:
            raise TypeError(f"{f}() got an unexpected keyword argument {k!r}")


def _same_width(f, datasets):
    d0 = datasets[0]
    for d in datasets:
        if d.dim != d0.dim:
            raise ValueError(f"{f}: {d.path} has {d.dim} features a frame and {d0.path} "
                             f"{d0.dim}: the datasets of a mixture must have the same width "
                             "(their stored dtypes may differ)")


def _every(f, datasets, arg, want, has, what):
    """labels= or targets= of a mixture (None, True, False): None serves
    them when every source has them (the attribute `has`), True requires
    that."""
    want = _a.optional_flag(f, arg, want)
    missing = [d.path for d in datasets if not getattr(d, has)]
    if want and missing:
        raise ValueError(f"{f}: {arg}=True, but {', '.join(missing)} has no {what}: "
                         f"pass {arg}=False")
    return not missing if want is None else want


def _mix_norm(opts, stats, dim):
    """opts.norm: the given (mean, var), when there is one set for all."""
    if stats is not None:
        mean, var = stats
        dp = ctypes.POINTER(ctypes.c_double)
        opts.norm = ctypes.pointer(_n.Norm(dim, mean.ctypes.data_as(dp), var.ctypes.data_as(dp)))


def _mix_normalization(f, datasets, normalize):
    """A mixture's normalisation: ("none" | "per-source" | "given", the
    given (mean, var) float64 arrays or None)."""
    if normalize is True or normalize is False or normalize is None:
        if normalize:
            for d in datasets:
                if d.stats is None:
                    raise ValueError(f"{f}: normalize=True normalises each dataset by its own "
                                     f"statistics, and {d.path} has none: give one set "
                                     "(normalize=train_ds)")
        return ("per-source" if normalize else "none"), None
    d0 = datasets[0]
    _mode, st = normalization(f, d0, normalize)
    return "given", st if st is not None else (
        np.ascontiguousarray(d0.stats.mean, np.float64),
        np.ascontiguousarray(d0.stats.var, np.float64))


class _MixLoader:
    """What the two mixture loaders share."""

    @property
    def quotas(self):
        """Samples (utterances) of each dataset per epoch."""
        return self.sampler.quotas

    @property
    def shares(self):
        return self.sampler.shares

    def _same_order(self, f, state, kind, what, keys):
        """Refuse a state that is not this kind of mixture's (`what`: "a
        mixture's") or whose `keys` are not this loader's: it would resume
        into another order."""
        if not isinstance(state, dict) or state.get("kind") != kind:
            raise ValueError(f"{f}: the state is not {what} (kind="
                             f"{state.get('kind') if isinstance(state, dict) else state!r})")
        mine = self.state_dict()
        for key in keys:
            if state.get(key) != mine[key]:
                raise ValueError(f"{f}: the state's {key} ({_a._show(state.get(key))}) is not "
                                 f"this loader's ({_a._show(mine[key])}): it would resume into "
                                 "another order")


class _MixFrameOrder(_MixLoader):
    """The frame mixture loader's order, place and state, without torch
    (ctxshard.torch.MixtureLoader sets the attributes and serves the
    batches): its mixture of the epoch in progress, length, set_epoch,
    state as a dict, and its C loader (cxs_mix_loader) made."""

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


class _MixUttOrder(_MixLoader):
    """The utterance mixture loader's order, place and state, without
    torch (ctxshard.torch.MixtureUtteranceLoader sets the attributes and
    serves the batches), and its C loader (cxs_mix_utt_loader) made."""

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
