"""What the torch loaders share (ctxshard.torch re-exports their public
names): tensors over the library's memory, host batch buffers and who
still uses them, devices, and datasets reopened by path in DataLoader
workers.  What is not about tensors or devices (the C loaders' creation,
batches and positions, the arguments that depend on the dataset) is
ctxshard._loaders'."""
import ctypes
import mmap
import sys
import warnings

import numpy as np
import torch
from torch.utils.data import Dataset as _TorchDataset

from . import CtxshardError, Dataset, _Buffer, _args as _a, _native as _n
from . import gpu as _gpu


class _ByPath(_TorchDataset):
    """A torch Dataset over a packed dataset that crosses into worker
    processes by path: pickled without its open Dataset (_ds), reopened on
    first use there.  Subclasses set path, _ds and _len.

    What was resolved at construction (the length, the statistics of
    normalize=True, the input size) travels with the object, so the
    dataset reopened must be the one it was made from: its identity (the
    manifest's checksum) is pickled too and checked on reopening; a
    dataset packed again at that path since is refused with a
    CtxshardError that says so."""

    @property
    def dataset(self):
        if self._ds is None:
            ds = Dataset(self.path, hugepage_budget=self.__dict__.get("_hugepage_budget", 0),
                         cache=self.__dict__.get("_cache"),
                         cache_limit=self.__dict__.get("_cache_limit"))
            want = self.__dict__.get("_identity")
            if want is not None and ds.identity != want:
                got = ds.identity
                ds.close()
                # the checksum that names the dataset differs: CXS_E_CHECKSUM
                raise CtxshardError(
                    _n.E_CHECKSUM,
                    f"{type(self).__name__}: {self.path} is not the dataset this object was "
                    f"made from (identity {got:016x}, expected {want:016x}: packed again "
                    f"since); its length ({self._len}) and statistics would be wrong -- "
                    f"make a new {type(self).__name__} from the dataset as it is now")
            self._ds = ds
        return self._ds

    def _remember(self, ds):
        self._ds = ds
        self._identity = ds.identity
        # a spawned worker reopens with the same copy into huge pages (its own)
        self._hugepage_budget = ds._hugepage_budget
        self._cache, self._cache_limit = ds._cache, ds._cache_limit  # a URL's cache

    def __getstate__(self):
        st = dict(self.__dict__)
        st["_ds"] = None
        return st

    def __len__(self):
        return self._len


class _Pair(tuple):
    """(x, y) arrays of one batch buffer; hashable by identity."""

    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    def __new__(cls, x, y):
        return super().__new__(cls, (x, y))


class _Buffers:
    """Host buffers a loader fills and hands out as tensors without a copy
    (the frame Loader's (x, y) pairs, _Pair: x float32 of `shape`, y int64
    [shape[0]] when `labels`), and when each may be filled again.  take()
    gives a pair to fill: one that no tensor uses any more (its reference
    count tells: every tensor sharing its storage keeps it alive), else a
    new one, pinned (`pinned`) or in huge pages; so steady-state iteration
    allocates nothing and never page-faults, while batches the caller
    keeps stay intact.  A pair taken is the loader's until release().
    (It refers to no loader: a loader that failed is freed at once, and
    with it the dataset it holds.)

    fence (pinned pairs: pin_memory, or the copying fallback of
    device='cuda'): () -> an event recorded on the current CUDA stream.
    Pinned pairs are read by copies the host does not wait for: x.to(dev,
    non_blocking=True) returns at once and drops the last reference while
    the copy is still queued.  Such a pair is taken again only after a
    fence has completed: the one copied() recorded on the stream the
    loader's copies of it went to, right after them (the caller may have
    made another stream current since), or, for a pair the caller copied
    itself, one recorded on the current stream when the pair is found
    unreferenced."""

    def __init__(self, shape, labels, pinned, fence=None):
        self.shape, self.labels, self.pinned, self.fence = shape, labels, pinned, fence
        self.pool, self._busy, self._fences, self._copied = [], set(), {}, {}

    def _new(self):
        if self.pinned:
            x = torch.empty(self.shape, dtype=torch.float32, pin_memory=True).numpy()
            y = torch.empty(self.shape[0], dtype=torch.int64, pin_memory=True).numpy()
        else:
            x = _anonymous(self.shape, np.float32)
            y = np.empty(self.shape[0], dtype=np.int64)
        return _Pair(x, y if self.labels else None)

    def take(self):
        free = [p for p in self.pool if p not in self._busy and sys.getrefcount(p[0]) <= 2
                and (p[1] is None or sys.getrefcount(p[1]) <= 2)]  # (the pair's, the call's)
        pair = None
        if self.fence is None:
            pair = free[0] if free else None
        else:
            for p in free:  # newly unreferenced: fenced after the copies that read it
                if id(p) not in self._fences:
                    ev = self._copied.pop(id(p), None)
                    self._fences[id(p)] = (p, ev if ev is not None else self.fence())
            for p, ev in self._fences.values():  # oldest first
                if ev.query():
                    pair = p
                    break
            if pair is None and len(self._fences) >= 4:
                # enough buffers in flight: wait for the oldest copy rather
                # than pin more memory
                pair, ev = next(iter(self._fences.values()))
                ev.synchronize()
            if pair is not None:
                del self._fences[id(pair)]
        if pair is None:
            pair = self._new()
            self.pool.append(pair)
        self._busy.add(pair)
        return pair

    def release(self, pair):
        """The loader is done with pair (its batch handed out, or never
        filled): reusable once no tensor over it is left."""
        self._busy.discard(pair)

    def copied(self, pair):
        """The loader queued copies that read pair on the current stream:
        their fence (pinned pairs; nothing otherwise)."""
        if self.fence is not None:
            self._copied[id(pair)] = self.fence()


def _anonymous(shape, dtype):
    """A zeroed array in its own anonymous mapping, advised to use huge
    pages: a batch buffer is written all over by the workers, and 2 MiB
    pages cut the page faults of its first use and the TLB misses of every
    later one (the C loader's own ring does the same)."""
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    m = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if size >= 2 << 20 and hasattr(mmap, "MADV_HUGEPAGE"):
        m.madvise(mmap.MADV_HUGEPAGE)
    return np.frombuffer(m, dtype=dtype, count=int(np.prod(shape))).reshape(shape)


def _gpu_device(device, emulate):
    """The library's device number for a CUDA torch.device (its index, or
    the current device), or the host emulation."""
    if emulate:
        return _gpu.EMULATE
    return device.index if device.index is not None else torch.cuda.current_device()


def _budget_note(who, device, info):
    """Say once (the caller keeps the flag) which default budget and mode a
    device loader took, and why: the memory it takes is the model's less."""
    where = "gpu_emulate=True" if device is None else f"device={str(device)!r}"
    warnings.warn(f"ctxshard: {who}({where}): {info['mode']} mode; {info['reason']} "
                  "(gpu_budget= sets it)", UserWarning, stacklevel=4)


def _device(func, device):
    """None (CPU tensors), or a torch.device / 'cpu' / 'cuda' / 'cuda:N' / N."""
    if device is None:
        return None
    if isinstance(device, (bool, np.bool_)) or not isinstance(device, (str, int, np.integer,
                                                                        torch.device)):
        raise TypeError(f"{func}: device={_a._show(device)} is a {type(device).__name__}, "
                        "expected None, 'cpu', 'cuda', 'cuda:N' or a torch.device")
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError):
        d = None
    if d is None or d.type not in ("cpu", "cuda"):
        raise ValueError(f"{func}: device={_a._show(device)} is not one of None, 'cpu', "
                         "'cuda', 'cuda:N' (or a torch.device of those types)")
    return None if d.type == "cpu" and d.index is None else d


def _tensor(ptr, shape, dtype, owner, device):
    """A tensor over the library's memory, no copy (ctxshard._Buffer):
    device memory for a CUDA device, host memory for device None (the
    emulated GPU).  owner keeps that memory alive as long as the tensor."""
    typestr = {torch.float32: "<f4", torch.bfloat16: "<i2", torch.int64: "<i8"}[dtype]
    if device is None:
        t = torch.from_numpy(np.asarray(_Buffer(owner, ptr, shape, typestr)))
    else:
        t = torch.as_tensor(_Buffer(owner, ptr, shape, typestr, cuda=True), device=device)
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def _ints(ptr, n, ctype=ctypes.c_int64):
    """n integers of the library's memory, copied into an int64 tensor."""
    return torch.from_numpy(np.ctypeslib.as_array(
        ctypes.cast(ptr, ctypes.POINTER(ctype)), (n,)).astype(np.int64))


def _copied(ptr, shape, dtype, pin_memory=False):
    """A new tensor of `shape` holding a copy of the library's memory."""
    t = torch.empty(shape, dtype=dtype, pin_memory=pin_memory)
    ctypes.memmove(t.data_ptr(), ptr, t.numel() * t.element_size())
    return t


def _padded(b, dim, device):
    """The tensors of a padded batch (cxs_utt_batch), copied: x, lengths,
    then y, then targets and target_lengths when the batch has them; on
    `device`, but for the lengths, which stay on the CPU (as CTCLoss likes
    them)."""
    n, T = b.n, b.tmax
    lengths = _ints(b.lengths, n)
    out, keep = [_copied(b.x, (n, T, dim), torch.float32), lengths], {id(lengths)}
    if b.y:
        out.append(_copied(b.y, (n, T), torch.int64))
    if b.targets:
        tl = _ints(b.target_lengths, n)
        out += [_copied(b.targets, (n, b.lmax), torch.int64), tl]
        keep.add(id(tl))
    if device is not None:
        out = [v if id(v) in keep else v.to(device, non_blocking=True) for v in out]
    return out
