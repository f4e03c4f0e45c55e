"""Whole-utterance batches for sequence models in torch (UtteranceLoader,
UtteranceDataset, UtteranceBatchSampler, pad_collate) over
ctxshard.utterances; ctxshard.torch re-exports them."""
import collections.abc
import ctypes
import warnings

import numpy as np
import torch

from . import Dataset, _args as _a, _native as _n, _raise, normalization, warn_if_incomplete
from . import gpu as _gpu, utterances as _u
from ._native import lib as _lib
from ._loaders import (_labels_default, _mixture_or, _opened, _opens_itself, _served, _streams,
                       _targets_default)
from ._torchbase import _ByPath, _budget_note, _device, _gpu_device, _ints, _padded, _tensor
from .utterances import PAD_LABEL






class UtteranceBatchSampler(_u.UtteranceSampler):
    """ctxshard.utterances.UtteranceSampler as a DataLoader batch_sampler:
    lists of utterance numbers, bucketed by length under frame_budget
    padded frames, the same count on every rank.  With UtteranceDataset and
    collate_fn=pad_collate:

        sampler = UtteranceBatchSampler(ds, frame_budget=20000, seed=0)
        loader = DataLoader(UtteranceDataset(ds), batch_sampler=sampler,
                            collate_fn=pad_collate, num_workers=2)
    """

    _FUNC = "UtteranceBatchSampler"


class Utterance(tuple):
    """One utterance of an UtteranceDataset: (x [T, D]), then y [T] when
    the dataset has per-frame labels, then target [L] (its label
    sequence) when targets are on.  A tuple; `fields` names its parts, so
    that pad_collate pads each as it should."""

    def __new__(cls, parts, fields):
        t = super().__new__(cls, parts)
        t.fields = fields
        return t

    def __getnewargs__(self):  # pickle and copy (DataLoader workers send items)
        return tuple(self), self.fields


class _PaddedBatch(collections.abc.Sequence):
    """A padded batch assembled at once, presented as a sequence of
    Utterance items; pad_collate returns its tensors as they are."""

    def __init__(self, x, lengths, y, targets=None, target_lengths=None):
        self.x, self.lengths, self.y = x, lengths, y
        self.targets, self.target_lengths = targets, target_lengths

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        t = int(self.lengths[i])
        parts, fields = [self.x[i, :t]], ["x"]
        if self.y is not None:
            parts.append(self.y[i, :t])
            fields.append("y")
        if self.targets is not None:
            parts.append(self.targets[i, :int(self.target_lengths[i])])
            fields.append("target")
        return Utterance(parts, tuple(fields)) if len(parts) > 1 else parts[0]

    def tensors(self):
        out = [self.x, self.lengths]
        if self.y is not None:
            out.append(self.y)
        if self.targets is not None:
            out += [self.targets, self.target_lengths]
        return tuple(out)


def pad_collate(batch):
    """collate_fn for DataLoader over an UtteranceDataset: (x [B, Tmax, D],
    lengths [B]), then y [B, Tmax] when the dataset has per-frame labels
    (padded by PAD_LABEL = -100, CrossEntropyLoss's ignore_index), then
    targets [B, Lmax] and target_lengths [B] when it has label sequences
    (padded by PAD_LABEL too; CTCLoss reads only target_lengths[i] of
    each row).  A batch from UtteranceDataset.__getitems__ comes out
    without a copy; a list of utterances (Utterance items, (x, y) or (x, y, target) tuples
    or x alone) is padded with torch.nn.utils.rnn.pad_sequence."""
    if isinstance(batch, _PaddedBatch):
        return batch.tensors()
    from torch.nn.utils.rnn import pad_sequence
    if batch and isinstance(batch[0], Utterance):
        fields = batch[0].fields
    elif batch and isinstance(batch[0], (tuple, list)):
        if len(batch[0]) not in (2, 3):
            raise TypeError(f"pad_collate: an utterance of {len(batch[0])} parts; expected x, "
                            "(x, y), (x, y, target) or an Utterance (UtteranceDataset's items)")
        fields = ("x", "y", "target")[:len(batch[0])]
    else:
        fields = ("x",)
        batch = [(x,) for x in batch]
    parts = dict(zip(fields, zip(*batch))) if batch else {f: () for f in fields}
    xs = list(parts["x"])
    out = [pad_sequence(xs, batch_first=True),
           torch.tensor([len(x) for x in xs], dtype=torch.int64)]
    if "y" in parts:
        out.append(pad_sequence(list(parts["y"]), batch_first=True, padding_value=PAD_LABEL))
    if "target" in parts:
        ts = list(parts["target"])
        out += [pad_sequence(ts, batch_first=True, padding_value=PAD_LABEL),
                torch.tensor([len(t) for t in ts], dtype=torch.int64)]
    return tuple(out)


class UtteranceDataset(_ByPath):
    """The utterances of a packed dataset as (x float32 [T, D], y int64
    [T]) -- x alone for a features-only dataset, (x, target int64 [L]) for
    one of label sequences, (x, y, target) for one with both (targets=False
    leaves the sequences out) -- for a DataLoader with
    UtteranceBatchSampler and pad_collate.  __getitems__ assembles a whole
    padded batch in the library (one call, any stored dtype, compressed
    datasets too).  normalize: as FrameDataset (normalize=train_ds for the
    training split's statistics); per_utterance=True: each utterance's own
    mean and variance per dimension.  Works in forked or spawned workers
    (the dataset is reopened by path)."""

    def __init__(self, path, normalize=False, per_utterance=False, labels=None, targets=None):
        f = "UtteranceDataset"
        ds = path if isinstance(path, Dataset) else Dataset(_a.path(f, "path", path))
        self.path = ds.path
        warn_if_incomplete(f, ds)
        self.labels = _labels_default(f, ds, labels)
        self.targets = _targets_default(f, ds, targets)
        self.per_utterance = _a.flag(f, "per_utterance", per_utterance)
        mode, st = normalization(f, ds, normalize)
        self.normalize = False if mode is None else ("own" if mode == "own" else st)
        self._remember(ds)
        self.input_size = ds.dim
        self.num_classes = ds.num_classes
        self._len = ds.num_utterances

    def _fetch(self, indices):
        nrm = self.dataset if self.normalize == "own" else self.normalize
        x, lengths, y = _u.pad_batch(self.dataset, indices, normalize=nrm,
                                     per_utterance=self.per_utterance, labels=self.labels)
        t = tl = None
        if self.targets:
            t, tl = (torch.from_numpy(a) for a in _u.pad_targets(self.dataset, indices))
        return _PaddedBatch(torch.from_numpy(x), torch.from_numpy(lengths),
                            torch.from_numpy(y) if y is not None else None, t, tl)

    def __getitem__(self, u):
        """x [T, D] float32 for a features-only dataset, else an Utterance:
        (x, y [T]) with per-frame labels, (x, target [L]) with label
        sequences, (x, y, target) with both."""
        u = _a.index("UtteranceDataset", "u", u, self._len, "utterances")
        return self._fetch(np.array([u], dtype=np.uint64))[0]

    def __getitems__(self, indices):
        return self._fetch(np.asarray(indices, dtype=np.uint64))


class _LoaderSampler(_u.UtteranceSampler):
    _FUNC = "UtteranceLoader"


class UtteranceLoader:
    """Padded batches of whole utterances from the library's prefetching
    utterance loader: (x float32 [B, Tmax, D] zero-padded, lengths int64
    [B]), then y int64 [B, Tmax] padded with PAD_LABEL = -100 when the
    dataset has per-frame labels (labels=False: not), then targets int64
    [B, Lmax] padded with PAD_LABEL and target_lengths int64 [B] when it
    has label sequences (targets=False: not) -- the inputs of torch's
    CTCLoss.  Yours to keep: fresh tensors, or with device="cuda" on the
    GPU path (gpu_mode "device") views of the loader's device buffers, each
    refilled only once no tensor refers to its batch.

    The batches are UtteranceSampler's (frame_budget, shuffle, seed,
    buckets, max_batch, long_utterances, drop_last, memory, blocks; rank
    and world_size from torch.distributed when initialised): every rank
    gets the same number of batches, so DDP never waits for a rank that
    has run out.  threads: workers (default min(CPUs, 4)); the batches do
    not depend on it.  normalize / per_utterance: as UtteranceDataset.
    set_epoch(e), state_dict() / load_state_dict() (exact mid-epoch resume,
    also on another number of ranks or threads; set_epoch(e) right after
    loading a state in e keeps its position, as Loader's).  After each batch,
    batch_info says which it was: utterances (their numbers: ds.ids[u] is
    the id), global (its place in the epoch's global batch order), index
    (this rank's position) and frames (real frames, without padding).

    device='cuda' (or 'cuda:N'): the dataset's features (and per-frame
    labels) are uploaded to the GPU once, and each batch is assembled
    there by the library: x, y and targets are CUDA tensors over its
    buffers, ready on the current torch stream and valid while you hold
    them, as Loader's device batches are; lengths and target_lengths stay
    on the CPU.  The batches are the CPU path's, byte for byte.  gpu_budget:
    the device bytes the resident data and the batch buffers may take
    (default half the device's memory, at most 80% of what is free, said
    once in a warning; a dataset that does not fit is refused, naming both
    sizes; gpu_info, after the first iter(), holds the mode and that
    reason, as Loader's); gpu_dtype: torch.float32 or torch.bfloat16 (x only).
    Without a usable GPU path (built without CUDA, no driver, torch without
    CUDA), or with per_utterance=True (computed on the CPU), batches are
    assembled on the CPU and copied (a warning says why; gpu_mode reads
    'host' and gpu_reason the reason; 'device' on the device path).
    gpu_emulate=True runs the device path on the host (CPU tensors), for
    tests.  path may be a URL, with cache= and cache_limit= as Loader's."""

    def __new__(cls, path=None, *args, **kw):
        def mixture():
            from ._torchmix import MixtureUtteranceLoader  # (which imports this module)
            return MixtureUtteranceLoader
        return _mixture_or(cls, UtteranceLoader, path, args, kw, 13,
                           "UtteranceLoader([...]): a mixture takes the options up to labels by "
                           "position; give the rest by name", mixture)

    def __init__(self, path, frame_budget, shuffle=True, seed=0, rank=None, world_size=None,
                 threads=None, drop_last=False, buckets=None, max_batch=None,
                 long_utterances="refuse", normalize=False, per_utterance=False, labels=None,
                 memory=None, blocks=None, device=None, targets=None, gpu_budget=None,
                 gpu_dtype=None, gpu_emulate=False, cache=None, cache_limit=None, stream=None):
        f = "UtteranceLoader"
        if not isinstance(path, Dataset):
            path = _a.path(f, "path", path)
        self.threads = _a.optional_integer(f, "threads", threads, 1, 256)
        self.per_utterance = _a.flag(f, "per_utterance", per_utterance)
        self.device = _device(f, device)
        gpu_budget = None if gpu_budget is None else _a.size(f, "gpu_budget", gpu_budget)
        if gpu_dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(f"{f}: gpu_dtype={_a._show(gpu_dtype)} is not one of "
                             "torch.float32, torch.bfloat16")
        gpu_emulate = _a.flag(f, "gpu_emulate", gpu_emulate)
        _opens_itself(f, path, cache=cache, cache_limit=cache_limit, stream=stream)
        stream = _streams(f, path, stream, memory is not None,
                          "shuffle=True and memory= (block mode)", self.device, gpu_emulate)
        self.dataset = path if isinstance(path, Dataset) else Dataset(
            path, cache=cache, cache_limit=cache_limit, stream=stream)
        warn_if_incomplete(f, self.dataset)
        self.sampler = _LoaderSampler(self.dataset, frame_budget, shuffle, seed, rank,
                                      world_size, drop_last, buckets, max_batch,
                                      long_utterances, memory, blocks)
        self.labels = _labels_default(f, self.dataset, labels)
        self.targets = _targets_default(f, self.dataset, targets)
        self._flags, self._norm, self._keep = _u._norm_args(f, self.dataset, normalize,
                                                            per_utterance)
        self.input_size = self.dataset.dim
        self.num_classes = self.dataset.num_classes
        if self.threads is None:
            self.threads = _lib.cxs_default_threads()
        self.batch_info = None
        self._setup_gpu(gpu_budget, gpu_dtype, gpu_emulate)

    def _setup_gpu(self, budget, dtype, emulate):
        """Choose the device path (batches assembled on the GPU) or the copy
        path; the device loader is made at the first iteration and kept
        (its upload happens once)."""
        self._gpu, self._gl, self._gl_order = None, None, None
        self.gpu_mode, self.gpu_reason, self.gpu_info = None, "", None
        self._budget_said = False
        cuda = self.device is not None and self.device.type == "cuda"
        if not (cuda or emulate):
            return
        why = None
        if self.per_utterance:
            why = "per_utterance normalisation is computed on the CPU"
        elif cuda and not torch.cuda.is_available():
            why = "this PyTorch has no usable CUDA device (torch.cuda.is_available() is False)"
        else:
            dev = _gpu_device(self.device, emulate)
            probe = _gpu.probe(dev)
            if probe["usable"]:
                self._gpu = dict(device=dev, budget=budget or 0,
                                 out_dtype=torch.bfloat16 if dtype == torch.bfloat16
                                 else torch.float32)
                self.gpu_mode = "device"
                if dev != _gpu.EMULATE:
                    self.device = torch.device("cuda", dev)
                return
            why = probe["reason"]
        self.gpu_mode, self.gpu_reason = "host", why
        if cuda:
            warnings.warn(f"ctxshard: UtteranceLoader(device={str(self.device)!r}): {why}; "
                          + ("batches are assembled on the CPU and copied"
                             if torch.cuda.is_available() else "batches stay on the CPU"),
                          UserWarning, stacklevel=3)
            if not torch.cuda.is_available():
                self.device = None

    # the sampler's state is the loader's
    def __len__(self):
        """Batches of this rank in the epoch in progress (after
        load_state_dict(), what remains of it)."""
        return len(self.sampler)

    @property
    def epoch(self):
        return self.sampler.epoch

    def set_epoch(self, epoch):
        """Serve `epoch` next, kept where the loader stands when it is
        positioned in it (Loader.set_epoch's rule; the sampler's state is
        the loader's)."""
        self.sampler.set_epoch(epoch)

    def state_dict(self):
        """seed, epoch, global_position and what fixes the order (see
        UtteranceSampler.state_dict)."""
        return self.sampler.state_dict()

    def load_state_dict(self, state):
        self.sampler.load_state_dict(state)

    def __iter__(self):
        if self._gpu is not None:
            return self._iter_gpu()
        return self._iter_host()

    def _view(self, ptr, shape, dtype, lease):
        """A tensor over a device batch's buffer (emulated: host memory); it
        holds the batch (its lease), and so the loader's handle: the
        memory outlives the loader object (not close())."""
        return _tensor(ptr, shape, dtype, lease,
                       None if self._gpu["device"] == _gpu.EMULATE else self.device)

    @staticmethod
    def _host_copy(ptr, n):
        return torch.from_numpy(np.ctypeslib.as_array(
            ctypes.cast(ptr, ctypes.POINTER(ctypes.c_int64)), shape=(n,)).copy())

    def _iter_gpu(self):
        s = self.sampler
        order = s._order()
        epoch = s.epoch
        o = self._gpu
        if self._gl is not None and self._gl_order is not order:
            # a resumed epoch (or the first after it) runs over another
            # order: the device loader is made again (uploading again)
            self.close()
        if self._gl is None:
            opts = _n.GpuUttOpts(o["device"], o["budget"], self._flags | _n.GPU_HOLD,
                                 _n.GPU_OUT_BF16 if o["out_dtype"] == torch.bfloat16
                                 else _n.GPU_OUT_F32, int(self.labels), int(self.targets), 0, 0,
                                 ctypes.pointer(self._norm) if self._norm is not None else None)
            ptr = ctypes.c_void_p()
            diag = _n.Diag()
            rc = _lib.cxs_gpu_utt_loader_create(self.dataset._ptr, order.ptr, ctypes.byref(opts),
                                                epoch, s._start, ctypes.byref(ptr),
                                                ctypes.byref(diag))
            if rc == _n.E_RANGE and b"budget" in diag.message:
                raise IndexError(diag.message.decode("utf-8", "replace").replace(
                    "budget_bytes", "gpu_budget").replace(
                    "give a larger budget, or use the CPU utterance loader",
                    "give a larger gpu_budget, or device=None (batches assembled on the CPU)"))
            if rc:
                _raise(rc, diag, what="GPU utterance loader")
            self._gl = _gpu._Owner(ptr, _lib.cxs_gpu_utt_loader_free, (self.dataset._h, order))
            self._gl_order = order
            self.gpu_info = _gpu.describe(_lib.cxs_gpu_utt_loader_describe, ptr)
            if not o["budget"] and not self._budget_said:
                # the default budget was taken: say once which, and why
                self._budget_said = True
                _budget_note("UtteranceLoader",
                             None if o["device"] == _gpu.EMULATE else self.device, self.gpu_info)
        else:
            rc = _lib.cxs_gpu_utt_loader_reset(self._gl.ptr, epoch, s._start)
            if rc:
                self._gpu_fail(rc)
        emulated = o["device"] == _gpu.EMULATE
        bp = ctypes.POINTER(_n.GpuUttBatch)()
        D = self.dataset.dim
        while True:
            stream = None if emulated else torch.cuda.current_stream(self.device).cuda_stream
            _gpu.next_batch(_lib.cxs_gpu_utt_loader_next_ex, self._gl.ptr, stream, bp,
                            "GPU utterance loader")
            if not bp:
                break
            if emulated:  # the host reads the batch: after the device's work on it
                _gpu.emulated_sync(None)
            b = bp.contents
            n, T = b.n, b.tmax
            # the batch is the caller's while any tensor over it exists
            lease = _gpu.Lease(self._gl, _lib.cxs_gpu_utt_loader_release, b.x, stream)
            out = [self._view(b.x, (n, T, D), o["out_dtype"], lease),
                   self._host_copy(b.host_lengths, n)]
            if b.y:
                out.append(self._view(b.y, (n, T), torch.int64, lease))
            if b.targets:
                out += [self._view(b.targets, (n, b.lmax), torch.int64, lease),
                        self._host_copy(b.host_target_lengths, n)]
            del lease
            _u._follow(s, _lib.cxs_gpu_utt_loader_position, self._gl.ptr, "GPU utterance loader")
            self.batch_info = {"utterances": np.ctypeslib.as_array(
                ctypes.cast(b.utts, ctypes.POINTER(ctypes.c_uint64)), shape=(n,)).copy(),
                "global": getattr(b, "global"), "index": b.index, "frames": b.frames}
            yield tuple(out)
            del out  # the generator keeps no batch the caller dropped
        _u._follow(s, _lib.cxs_gpu_utt_loader_position, self._gl.ptr, "GPU utterance loader")

    def _gpu_fail(self, rc):
        from .gpu import _fail
        _fail(rc, _lib.cxs_gpu_utt_loader_error(self._gl.ptr), what="GPU utterance loader")

    def close(self):
        """No more device batches from this loader: its device memory is
        freed now, or, while tensors of batches handed out remain, when the
        last of them goes (they stay valid: close() never frees memory a
        tensor points into).  Without close() the same happens when the
        loader is collected."""
        self._gl, self._gl_order = None, None

    def _iter_host(self):
        s = self.sampler
        opts = _n.UttLoaderOpts(self.threads, 0, self._flags, int(self.labels),
                                ctypes.pointer(self._norm) if self._norm is not None else None,
                                0, int(self.targets))
        ptr = _opened(_lib.cxs_utt_loader_create_ex, "utterance loader", self.dataset._ptr,
                      s._order().ptr, ctypes.byref(opts), s.epoch, s._start)

        def convert(b):
            self.batch_info = {"utterances": _ints(b.utts, b.n, ctypes.c_uint64).numpy(),
                               "global": getattr(b, "global"), "index": b.index,
                               "frames": b.frames}
            return tuple(_padded(b, self.dataset.dim, self.device))

        yield from _served(s, ptr, "utt_loader", _n.UttBatch, "utterance loader", convert)
