"""PyTorch adapters for ctxshard.

FrameDataset: a map-style Dataset of (window, label) for users who keep
their DataLoader and samplers; it fetches whole batches at once through
__getitems__ (pass collate_fn=ctxshard.torch.collate to skip the per-sample
stacking).

Loader: the native prefetching loader as an iterable of (x, y) tensors,
x float32 [B, (2k+1)*D], y int64 [B]; no Python in the hot path, with
set_epoch(), state_dict()/load_state_dict() for exact mid-epoch resume (also
on another number of ranks or threads), and rank/world_size from
torch.distributed when it is initialised.  shuffle="block" reads data larger
than memory in blocks of whole utterances within memory= bytes.  With
device='cuda' the batches are delivered into GPU memory by the library
(ctxshard.gpu: stream, resident or pool mode) and come out as CUDA tensors
without a host copy, ordered on the current torch stream."""
import collections.abc
import ctypes
import warnings

import numpy as np
import torch
from torch.utils.data._utils.collate import default_collate

from . import (BLOCK, Dataset, Sampler, _args as _a, _native as _n, _raise, normalization,
               warn_if_incomplete)
from . import gpu as _gpu, utterances as _u
from ._native import lib as _lib
from ._loaders import (_FrameOrder, _batches, _frame_labels, _labels_default, _mixture_or,
                       _opened, _opens_itself, _pool_layout, _streams)
from ._torchbase import _Buffers, _ByPath, _budget_note, _device, _gpu_device, _tensor

__all__ = ["FrameDataset", "Loader", "collate"]

class _Batch(collections.abc.Sequence):
    """A batch gathered at once, presented as a sequence of (x_i, y_i) so that
    DataLoader's default collate works; collate() returns the tensors as
    they are."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def collate(batch):
    """collate_fn for DataLoader over a FrameDataset: (x, y) without a copy."""
    if isinstance(batch, _Batch):
        return batch.x, batch.y
    return default_collate(batch)


class FrameDataset(_ByPath):
    """Frames of a packed dataset as (x, y): x float32 [(2k+1)*D], y int64
    (x alone for a features-only dataset, such as a test split).

    labels: None (the default) when the dataset has them, True (an error
    on a features-only dataset) or False.  normalize: False; train_ds (the
    training split's Dataset), train_ds.stats or a (mean, var) pair --
    normalise dev and test with the training split's statistics; the
    dataset itself for its own; True also means its own, with a warning
    once per dataset (ctxshard.Dataset.gather).

    Works in DataLoader worker processes (forked or spawned): each process
    opens the dataset on first use; the files are shared through the page
    cache."""

    def __init__(self, path, context, normalize=False, labels=None):
        f = "FrameDataset"
        ds = path if isinstance(path, Dataset) else Dataset(_a.path(f, "path", path))
        self.path = ds.path
        self.context = _a.integer(f, "context", context, 0, 1000000)
        warn_if_incomplete(f, ds)
        self.labels = _labels_default(f, ds, labels)
        mode, st = normalization(f, ds, normalize)
        # resolved once: the statistics travel with the object to workers
        self.normalize = False if mode is None else ("own" if mode == "own" else st)
        self._remember(ds)
        self.input_size = ds.input_size(self.context)
        self.num_classes = ds.num_classes
        self._len = len(ds)

    def _fetch(self, indices):
        nrm = self.dataset if self.normalize == "own" else self.normalize
        if not self.labels:  # features only (a test split), or labels=False
            return torch.from_numpy(self.dataset.gather(indices, self.context,
                                                        normalize=nrm)), None
        x, y = self.dataset.gather(indices, self.context, normalize=nrm, labels=True)
        return torch.from_numpy(x), torch.from_numpy(y)

    def __getitem__(self, i):
        """(x, y), or x alone for a features-only dataset."""
        if isinstance(i, (list, tuple, np.ndarray, torch.Tensor)):
            x, y = self._fetch(np.asarray(i))
            return (x, y) if y is not None else x
        x, y = self._fetch(np.array([i]))
        return (x[0], y[0]) if y is not None else x[0]

    def __getitems__(self, indices):
        x, y = self._fetch(np.asarray(indices))
        return _Batch(x, y) if y is not None else list(x)


class Loader(_FrameOrder):
    """Batches of (x, y) from ctxshard's native prefetching loader; of x
    alone with labels=False (a dataset without frame labels, like a test
    split, needs it: one shape per call, never x alone by surprise).

    Each batch is a fresh pair of tensors that the loader filled in place
    (no copy), yours to keep.  shuffle: True, a new seeded permutation of all
    frames every epoch; False, in order; "block", a permutation drawn from a
    few blocks of whole utterances at a time, read sequentially ahead of use
    within memory= bytes of page cache (bytes or a string like "2G";
    required, the order depends on it) -- for data larger than memory, or
    cold on disk; blocks= (1..1024, default 8) is how many blocks a batch
    draws from.  weighted: class-balanced draws with replacement
    (class_weights to choose them); rank/world_size: each rank gets an
    equal, disjoint share of every epoch (defaults from torch.distributed
    when initialised).  An epoch advances by itself after a complete pass;
    set_epoch(e) chooses one, and keeps the position when the loader is
    already positioned in e (right after load_state_dict() of a state in
    e: a resumed run's set_epoch continues it).  state_dict() is (seed,
    epoch, global position) with what fixes the order; load_state_dict()
    resumes exactly there, also on another number of ranks (world_size) or threads: the
    ranks together continue the same global order, nothing repeated or
    lost.

    device='cuda' (or 'cuda:N'): batches are written into GPU memory by the
    library and yielded as CUDA tensors over its buffers, ready on the
    current torch stream.  Like any tensor, a batch is valid while anything
    refers to it (a list, an autograd graph over several micro-batches):
    its buffer is refilled only after that, and after the work queued on
    the stream it was handed to.  gpu_mode: 'auto' (resident when the features
    fit gpu_budget bytes, default half the device's memory, at most 80% of
    what is free; else stream),
    'stream', 'resident' or 'pool' (see ctxshard.gpu; pool serves the block
    order of the shared block schedule, blocks of one pool segment, and
    resumes mid-epoch like the other modes; its default budget is half the
    device's total memory, less when the dataset needs less, never a share
    of what is free, so that a resume lays the pool out again alike).  A
    default budget is said once in a warning naming the mode and why
    (gpu_info holds it).  gpu_dtype:
    torch.float32 or torch.bfloat16 (resident and pool).  When the library
    has no usable GPU path (built without CUDA, no driver), the loader falls
    back to pinned host batches copied with non_blocking=True; gpu_mode then
    reads 'host' and gpu_reason says why.  gpu_emulate=True runs the GPU
    path on the host (CPU tensors), for tests.

    hugepage_budget (bytes or a string like "4G"; given a path): the
    dataset is opened with its features and labels copied into huge pages
    when they fit (ctxshard.Dataset, hugepage_budget): faster random
    windows for that much memory; self.dataset.hugepages says whether.

    path may be a URL (http://, https://, s3://BUCKET/PREFIX): the dataset
    is fetched into the node-local cache and read from there; cache= and
    cache_limit= are ctxshard.Dataset's (given a path or URL, not a
    Dataset)."""

    def __new__(cls, path=None, *args, **kw):
        return _mixture_or(cls, Loader, path, args, kw, 5,
                           "Loader([...]): a mixture takes context, batch_size, shuffle, seed "
                           "and drop_last by position; give the rest by name",
                           lambda: MixtureLoader)

    def __init__(self, path, context, batch_size, shuffle=True, seed=0, drop_last=False,
                 weighted=False, class_weights=None, rank=None, world_size=None, threads=None,
                 pin_memory=False, device=None, normalize=False, labels=None, num_samples=0,
                 gpu_mode="auto", gpu_budget=None, gpu_dtype=None, gpu_emulate=False,
                 prefetch=True, memory=None, blocks=None, hugepage_budget=None, cache=None,
                 cache_limit=None, stream=None):
        f = "Loader"
        # Every argument checked here, where it is given (ctxshard._args):
        # nothing truncated, nothing left to fail at the first batch.
        if not isinstance(path, Dataset):
            path = _a.path(f, "path", path)
        context = _a.integer(f, "context", context, 0, 1000000)
        batch_size = _a.integer(f, "batch_size", batch_size, 1, 2**31 - 1)
        if isinstance(shuffle, str):
            if shuffle != "block":
                raise ValueError(f"{f}: shuffle={shuffle!r} is not one of True (a full shuffle), "
                                 "False (in order) or \"block\" (blocks of utterances within "
                                 "memory=, for data larger than memory)")
        else:
            shuffle = _a.flag(f, "shuffle", shuffle)
        seed = _a.integer(f, "seed", seed, 0, 2**64 - 1)
        drop_last = _a.flag(f, "drop_last", drop_last)
        weighted = _a.flag(f, "weighted", weighted) or class_weights is not None
        threads = _a.optional_integer(f, "threads", threads, 1, 256)
        pin_memory = _a.flag(f, "pin_memory", pin_memory)
        num_samples = _a.integer(f, "num_samples", num_samples, 0, None,
                                 "0 (one epoch's worth) or a positive count")
        if num_samples and not weighted:
            raise ValueError(f"{f}: num_samples={num_samples} applies to weighted sampling "
                             "only (weighted=True): other orders serve every frame once")
        if gpu_mode not in _gpu.MODES:
            raise ValueError(f"{f}: gpu_mode={_a._show(gpu_mode)} is not one of "
                             + ", ".join(repr(m) for m in _gpu.MODES))
        gpu_budget = None if gpu_budget is None else _a.size(f, "gpu_budget", gpu_budget)
        if gpu_dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(f"{f}: gpu_dtype={_a._show(gpu_dtype)} is not one of "
                             "torch.float32, torch.bfloat16")
        gpu_emulate = _a.flag(f, "gpu_emulate", gpu_emulate)
        prefetch = _a.flag(f, "prefetch", prefetch)
        device = _device(f, device)
        self.rank, self.world_size = _u._dist_defaults(f, rank, world_size)
        kind, memory, blocks = self._order_kind(f, shuffle, weighted, memory, blocks)
        _opens_itself(f, path, hugepage_budget=hugepage_budget, cache=cache,
                      cache_limit=cache_limit, stream=stream)
        stream = _streams(f, path, stream, kind == BLOCK, "shuffle=\"block\"", device,
                          gpu_emulate)
        self.dataset = path if isinstance(path, Dataset) else Dataset(
            path, hugepage_budget=hugepage_budget or 0, cache=cache, cache_limit=cache_limit,
            stream=stream)
        warn_if_incomplete(f, self.dataset)
        if weighted and not self.dataset.has_frame_labels:
            raise ValueError(f"{f}: weighted sampling needs per-frame labels (it balances the "
                             f"classes), and {self.dataset.path} has "
                             + ("none (label sequences only)" if self.dataset.has_label_seqs
                                else "no labels (features only, like a test split)"))
        self.labels = _frame_labels(f, self.dataset, labels)
        mode, st = normalization(f, self.dataset, normalize)
        self.normalize = mode is not None
        self._norm_stats = st  # (mean, var) of another dataset (train's), or None
        self.context, self.batch_size = context, batch_size
        self.input_size = self.dataset.input_size(self.context)
        self._prefetch, self._warming = False, None
        self._start_prefetch(prefetch, kind, memory)
        self.drop_last, self.seed = drop_last, seed
        self.sampler = Sampler(self.dataset, kind, self.seed, self.rank, self.world_size,
                               self.drop_last, num_samples, class_weights, memory, blocks)
        # The epoch in progress may start at a global position (origin) other
        # than 0: a run resumed from a state_dict.  Later epochs use
        # self.sampler (origin 0).
        self._origin, self._origin_sampler = 0, None
        self.threads = _lib.cxs_default_threads() if threads is None else threads
        self.device = device
        self.epoch, self._start = 0, 0  # _start: this rank's position in _sampler_now()
        # The GPU path: chosen here, the device loader created on first use
        # and kept across epochs (a resident upload happens once).
        self._gpu_opts, self._gl, self.gpu_info = None, None, None
        self._held, self._held_said = [0], False  # device batches the caller holds
        self._budget_said = False
        self.gpu_mode, self.gpu_reason = None, ""
        cuda = self.device is not None and self.device.type == "cuda"
        if cuda and not torch.cuda.is_available():
            # the documented fallback, also for a torch without CUDA (whose
            # pinned memory and .to("cuda") would fail at the first batch)
            self.gpu_mode = "host"
            self.gpu_reason = ("this PyTorch has no usable CUDA device (torch.cuda.is_available() "
                               "is False)")
            warnings.warn(f"ctxshard: Loader(device={str(self.device)!r}): "
                          f"{self.gpu_reason}; batches stay on the CPU", UserWarning,
                          stacklevel=2)
            self.device, cuda = None, False
            if not gpu_emulate:
                pin_memory = False
        if gpu_emulate or cuda:
            dev = _gpu_device(self.device, gpu_emulate)
            probe = _gpu.probe(dev)
            if probe["usable"]:
                self.gpu_mode = gpu_mode
                self._gpu_opts = dict(device=dev, mode=gpu_mode, budget=gpu_budget,
                                      out_dtype="bfloat16" if gpu_dtype == torch.bfloat16 else "float32")
                if dev != _gpu.EMULATE:
                    self.device = torch.device("cuda", dev)
            else:
                self.gpu_mode, self.gpu_reason = "host", probe["reason"]
        if pin_memory and not torch.cuda.is_available():
            warnings.warn("ctxshard: Loader(pin_memory=True): pinned memory needs CUDA, and "
                          "this PyTorch has no usable CUDA device; batches are not pinned",
                          UserWarning, stacklevel=2)
            pin_memory = False
        self.pin_memory = pin_memory or (cuda and self._gpu_opts is None)
        # Pinned buffers are reused only after the copies that read them
        # (_Buffers): the fence is an event on the current stream.
        fence = None
        if self.pin_memory:
            fdev = self.device if cuda else None
            fence = lambda: torch.cuda.current_stream(fdev).record_event()  # noqa: E731
        self._buffers = _Buffers((self.batch_size, self.input_size), self.labels,
                                 self.pin_memory, fence)

    def _make_view(self, ptr, shape, dtype, lease):
        # a fresh tensor for every batch: it holds the batch (its lease),
        # and the lease the C loader's memory (its owner)
        return _tensor(ptr, shape, dtype, lease,
                       None if self._gpu_opts["device"] == _gpu.EMULATE else self.device)

    def _held_note(self, held):
        """Say once that batches the caller holds take device memory."""
        if held > 2 and not self._held_said:
            self._held_said = True
            info = self._gl.info()
            warnings.warn(f"ctxshard: Loader: {held} device batches are held at once (kept "
                          "in a list, gradient accumulation, a graph not yet backward()ed): "
                          "the loader makes another batch buffer for each one held rather "
                          "than rewrite it, within its device budget (gpu_budget; "
                          f"{info['device_bytes']} bytes held now; {info['reason']})",
                          UserWarning, stacklevel=3)

    def _iter_gpu(self):
        o = self._gpu_opts
        sampler = self._sampler_now()
        if self._gl is not None and self._gl.sampler is not sampler:
            # a resumed epoch (or the first one after it) runs over another
            # sampler: the device loader is made again (resident mode
            # uploads again, once per resume)
            self._gl.close()
            self._gl = None
        if self._gl is None:
            self._gl = _gpu.GpuLoader(self.dataset, sampler, self.context, self.batch_size,
                                      device=o["device"], mode=o["mode"], budget=o["budget"],
                                      normalize=(self._norm_stats if self._norm_stats
                                                 is not None else self.dataset if
                                                 self.normalize else False),
                                      labels=self.labels,
                                      drop_last=self.drop_last, threads=self.threads,
                                      out_dtype=o["out_dtype"], epoch=self.epoch,
                                      start=self._start, hold=True)
            self.gpu_info = self._gl.info()
            self.gpu_mode = self.gpu_info["mode"]
            if o["budget"] is None and not self._budget_said:
                # the default budget was taken: say once which, and the mode
                self._budget_said = True
                _budget_note("Loader", None if o["device"] == _gpu.EMULATE else self.device,
                             self.gpu_info)
        else:
            self._gl.reset(self.epoch, self._start)
        want = getattr(self, "_want_pool", None)
        have = _pool_layout(self.gpu_info["reason"])
        if want and self.gpu_mode == "pool" and have != want:
            raise ValueError(f"load_state_dict: the saved run's GPU pool was laid out as "
                             f"'{want}', this one as '{have}': its block order would differ.  "
                             "Resume with the same gpu_budget (or the default on a device of "
                             "the same size), batch_size and pool segments")
        xdtype = torch.bfloat16 if o["out_dtype"] == "bfloat16" else torch.float32
        emulated = o["device"] == _gpu.EMULATE
        first = True
        held = self._held
        while True:
            stream = None if emulated else torch.cuda.current_stream(self.device).cuda_stream
            if not first:
                self._kick_prefetch()  # once the first batch is out (see _start_prefetch)
            first = False
            b = self._gl.next(stream)
            if b is None:
                break
            if emulated:  # the host reads the batch: after the device's work on it
                _gpu.emulated_sync(None)
            _u._follow(self, _lib.cxs_gpu_loader_position, self._gl._ptr, "GPU loader")
            # the batch is the caller's while any tensor over it exists
            lease = _gpu.Lease(self._gl.owner, _lib.cxs_gpu_loader_release, b.x, stream, held)
            self._held_note(held[0])
            x = self._make_view(b.x, (b.n, self.input_size), xdtype, lease)
            y = None if b.y is None else self._make_view(b.y, (b.n,), torch.int64, lease)
            del lease, b
            if y is None:
                yield x
            else:
                yield x, y
            del x, y  # the generator keeps no batch the caller dropped
        _u._follow(self, _lib.cxs_gpu_loader_position, self._gl._ptr, "GPU loader")

    def close(self):
        """No more device batches from this Loader: the GPU loader's memory
        is freed now, or, while tensors of batches handed out remain, when
        the last of them goes (they stay valid: close() never frees memory
        a tensor points into).  Also done when the Loader is collected."""
        self._prefetch = False
        if self._warming is not None:
            self._warming.stop()
            self._warming = None
        if self._gl is not None:
            self._gl.close()
            self._gl = None

    def __iter__(self):
        if self._gpu_opts is not None:
            return self._iter_gpu()
        return self._iter_host()

    def _iter_host(self):
        ds = self.dataset
        opts = _n.LoaderOpts(self.context, self.batch_size, self.threads, 0,
                             _n.GATHER_NORMALIZE if self.normalize else 0, int(self.drop_last),
                             int(self.labels), 1)
        if self._norm_stats is not None:  # train's statistics (copied at create)
            mean, var = self._norm_stats
            dp = ctypes.POINTER(ctypes.c_double)
            nrm = _n.Norm(ds.dim, mean.ctypes.data_as(dp), var.ctypes.data_as(dp))
            opts.norm = ctypes.pointer(nrm)
        ptr = _opened(_lib.cxs_loader_create_ex, "loader", ds._ptr, self._sampler_now()._ptr,
                      ctypes.byref(opts), self.epoch, self._start)
        pending = {}  # data address -> pair: provided, not yet handed back
        ring = _lib.cxs_loader_ring(ptr)  # the buffers that keep every worker busy

        def provide():
            pair = self._buffers.take()
            rc = _lib.cxs_loader_provide(ptr, pair[0].ctypes.data,
                                         pair[1].ctypes.data if pair[1] is not None else None)
            if rc:
                _raise(rc, what="loader")
            pending[pair[0].ctypes.data] = pair

        try:
            for _ in range(ring):
                provide()
            for b in _batches(_lib.cxs_loader_next_ex, ptr, _n.Batch, "loader",
                              _lib.cxs_loader_next_timed):
                pair = pending.pop(b.x)
                n = b.n
                x = torch.from_numpy(pair[0])
                y = torch.from_numpy(pair[1]) if pair[1] is not None else None
                self._buffers.release(pair)  # reusable once x and y are gone
                provide()
                _u._follow(self, _lib.cxs_loader_position, ptr, "loader")
                if n < self.batch_size:
                    x = x[:n]
                    y = y[:n] if y is not None else None
                if self.device is not None:
                    x = x.to(self.device, non_blocking=True)
                    y = y.to(self.device, non_blocking=True) if y is not None else None
                    self._buffers.copied(pair)
                yield (x, y) if y is not None else x
                # once the first batch is out: starting a thread waits for
                # it to run, and its residency check competes with the
                # workers (see _start_prefetch)
                self._kick_prefetch()
            _u._follow(self, _lib.cxs_loader_position, ptr, "loader")  # (an empty epoch)
        finally:
            _lib.cxs_loader_free(ptr)  # joins the workers before the buffers go
            for pair in pending.values():
                self._buffers.release(pair)
            pending.clear()


# The mixtures and the whole-utterance loaders live in modules of their own
# (they need Loader's module loaded: they are imported last).
from ._torchmix import (MixedBatch, MixedUtterances, MixtureLoader,  # noqa: E402
                        MixtureUtteranceLoader)
from ._torchutt import (Utterance, UtteranceBatchSampler, UtteranceDataset,  # noqa: E402,F401
                        UtteranceLoader, pad_collate)
from .utterances import PAD_LABEL  # noqa: E402,F401

__all__ += ["MixtureLoader", "MixedBatch", "UtteranceLoader", "UtteranceDataset",
            "UtteranceBatchSampler", "pad_collate", "PAD_LABEL", "MixtureUtteranceLoader",
            "MixedUtterances"]
