"""ctxshard: packed speech-frame datasets, read at memory speed.

    import ctxshard
    with ctxshard.open("train.cxs") as ds:
        len(ds), ds.dim, ds.guard, ds.vocab
        w = ds.window(12345, 30)               # zero-copy view, (61, D)
        x, y = ds.gather([1, 2, 3], 30, labels=True)   # float32 [3, 61*D], int64 [3]

A thin ctypes binding over libctxshard; numpy is the only requirement.
PyTorch adapters are in ctxshard.torch.  Views returned here point into the
read-only file mapping; they keep it alive, so closing the dataset while
views exist is safe (the files are unmapped when the last view goes)."""
import atexit
import ctypes
import errno
import os
import threading
import time
import weakref
from ctypes import byref, c_char_p, c_size_t, c_uint32, c_uint64, c_void_p

import numpy as np

from . import _args as _a
from . import _native as _n
from ._version import __version__
from ._native import lib as _lib

__all__ = ["open", "Dataset", "Warming", "fetch", "push", "cache_dir", "cache_entries", "cache_prune", "Sampler", "CtxshardError", "version", "cpu_count",
           "default_threads", "memory_available",
           "SEQUENTIAL", "SHUFFLE", "WEIGHTED", "BLOCK", "Writer", "RejectedUtterance", "pack",
           "check", "PHONEMES", "import_kaldi", "import_hdf5"]

SEQUENTIAL, SHUFFLE, WEIGHTED, BLOCK = (_n.SAMPLER_SEQUENTIAL, _n.SAMPLER_SHUFFLE,
                                        _n.SAMPLER_WEIGHTED, _n.SAMPLER_BLOCK)


class CtxshardError(Exception):
    """A dataset is invalid or corrupt: code is the CXS_E_* code; file and
    offset say where, when the failure has a place in a file (the shard
    that was truncated, the chunk or block that fails its checksum), else
    None."""

    def __init__(self, code, message, file=None, offset=None):
        super().__init__(message)
        self.code = code
        self.file = file
        self.offset = offset


def _raise(rc, diag=None, what=""):
    msg = diag.message.decode("utf-8", "replace") if diag is not None and diag.message else ""
    if not msg:
        msg = (what + ": " if what else "") + _lib.cxs_strerror(rc).decode()
    if rc == _n.E_RANGE:
        raise IndexError(msg)
    if rc == _n.E_INVALID:
        raise ValueError(msg)
    said = diag is not None and diag.message
    if rc == _n.E_NO_LABELS:
        raise ValueError(msg if said else (what + ": " if what else "") +
                         "labels asked of a dataset that has none (features only, like a test "
                         "split, or label sequences only: label_seq(u)): pass labels=False")
    if rc == _n.E_NO_SEQUENCES:
        raise ValueError(msg if said else (what + ": " if what else "") +
                         "label sequences asked of a dataset that has none (pack with "
                         "--transcripts sequence or both; has_label_seqs says)")
    if -4096 < rc < 0:
        raise OSError(-rc, msg)
    file = offset = None
    if said:
        file = os.fsdecode(diag.file) if diag.file else None
        offset = None if diag.offset == _n.NO_OFFSET else int(diag.offset)
    raise CtxshardError(rc, msg, file, offset)


def version():
    """Version of the loaded libctxshard (the package refuses to load any
    other than its own, __version__)."""
    return _lib.cxs_version().decode()


def cpu_count():
    """CPUs this process may run on: its affinity mask, capped by a CPU
    quota of its cgroup (a container's or a cluster job's limit), as the
    library counts them (cxs_cpu_count).  os.cpu_count() counts the
    machine's CPUs; use this one to size DataLoader workers and threads."""
    return int(_lib.cxs_cpu_count())


def default_threads():
    """Worker threads a loader starts when threads=None: cpu_count()
    capped at 4, the library's one default (cxs_default_threads)."""
    return int(_lib.cxs_default_threads())


def memory_available():
    """Bytes of memory the page cache can give a dataset here, as a dict:
    available (what decisions use), mem_available (/proc/meminfo),
    cgroup_limit (0 when the process is not in a limited memory cgroup),
    cgroup_available, from_env (True when CTXSHARD_MEMORY_AVAILABLE set it)."""
    m, diag = _n.Memory(), _n.Diag()
    rc = _lib.cxs_memory_probe(byref(m), byref(diag))
    if rc:
        _raise(rc, diag)
    return {"available": m.available, "mem_available": m.mem_available,
            "cgroup_limit": m.cgroup_limit, "cgroup_available": m.cgroup_available,
            "from_env": bool(m.from_env)}


class _Handle:
    """Owns the C dataset; unmapped when the dataset and all views are gone.
    warms: the warm-ups reading it (_WarmCore), ended before it closes,
    whichever of them the collector finalises first."""

    def __init__(self, ptr):
        self.ptr = ptr
        self.warms = set()

    def __del__(self):
        for core in list(getattr(self, "warms", ())):
            core.finish(True)
        if self.ptr:
            _lib.cxs_dataset_close(self.ptr)
            self.ptr = None


class _Buffer:
    """The one description of memory the library owns -- a piece of a
    dataset's mapping, a loader's host or device buffer -- for numpy
    (__array_interface__) or torch (__cuda_array_interface__ with
    cuda=True), no copy.  owner: what keeps that memory alive (a dataset or
    loader handle); numpy keeps this object as the array's base and torch
    as long as the tensor, and so the owner.  No 'stream' entry for device
    memory: the loaders have made the consumer's stream wait for it."""

    __slots__ = ("__array_interface__", "__cuda_array_interface__", "owner")

    def __init__(self, owner, addr, shape, typestr, cuda=False, readonly=False):
        d = {"data": (int(addr), readonly), "shape": tuple(shape), "typestr": typestr}
        if cuda:
            self.__cuda_array_interface__ = dict(d, strides=None, version=2)
        else:
            self.__array_interface__ = dict(d, version=3)
        self.owner = owner


def _view(handle, addr, shape, typestr):
    """A read-only array over the dataset's mapping; it keeps it open."""
    a = np.asarray(_Buffer(handle, addr, shape, typestr, readonly=True))
    a.flags.writeable = False
    return a


# stored type: its name, the numpy type of a view of it (None: coded, served
# decoded into float32, never as a view), its bytes a value
_DTYPES = {_n.DTYPE_F32: ("float32", "<f4", 4), _n.DTYPE_F16: ("float16", "<f2", 2),
           _n.DTYPE_BF16: ("bfloat16", "<u2", 2), _n.DTYPE_Q8: ("q8", None, 1),
           _n.DTYPE_Q16: ("q16", None, 2)}


class Stats:
    """Statistics stored at pack time: count, mean and var (float64 [dim]),
    label_counts (uint64 [vocab]); read-only views."""

    def __init__(self, count, mean, var, label_counts, source=None, pack_normalize=None):
        self.count, self.mean, self.var, self.label_counts = count, mean, var, label_counts
        # where they come from: the dataset's path and how it was packed
        # ("none" or "utterance"), so that normalize=train_ds.stats can be
        # checked like normalize=train_ds; None when not known
        self.source, self.pack_normalize = source, pack_normalize

    @property
    def std(self):
        return np.sqrt(self.var)

    def __repr__(self):
        return f"Stats(count={self.count}, dim={len(self.mean) if self.mean is not None else 0})"


def _warm_result(path, rc, r, diag):
    """cxs_dataset_warm's outcome as warm() gives it: the dict, or raised."""
    if rc == -errno.ENOMEM and diag.message:
        raise MemoryError(diag.message.decode("utf-8", "replace"))
    if rc == -errno.ECANCELED:
        raise InterruptedError(f"{path}: warming stopped")
    if rc:
        _raise(rc, diag, what="warm")
    return {"total_bytes": r.total_bytes, "cached_before": r.cached_before,
            "bytes_read": r.bytes_read, "seconds": r.seconds, "fits": bool(r.fits),
            "available": r.memory.available}


# The warm-ups running now: stopped and joined at exit, before the datasets
# they read can be closed by the interpreter's teardown.
_RUNNING_WARMS = weakref.WeakSet()


@atexit.register
def _stop_warms():
    for core in list(_RUNNING_WARMS):
        core.finish(True)


class _WarmCore:
    """One C warm-up (cxs_warm), held by its Warming and by its dataset's
    _Handle, so that whichever is finalised first ends it (the collector
    finalises a reference cycle in any order); finished once, under a lock,
    by whichever thread comes first."""

    __slots__ = ("ptr", "lock", "outcome", "last", "__weakref__")

    def __init__(self, ptr):
        self.ptr, self.lock, self.outcome, self.last = ptr, threading.Lock(), None, (0, 0)

    def poll(self):
        """(running, done, total); running False once finished."""
        with self.lock:
            if self.outcome is not None:
                return (False,) + self.last
            done, total = c_uint64(), c_uint64()
            running = _lib.cxs_warm_poll(self.ptr, byref(done), byref(total)) == 1
            self.last = (done.value, total.value)
            return (running,) + self.last

    def finish(self, stop):
        with self.lock:
            if self.outcome is None:
                ptr, self.ptr = self.ptr, None
                r, diag = _n.WarmResult(), _n.Diag()
                rc = _lib.cxs_warm_finish(ptr, 1 if stop else 0, byref(r), byref(diag))
                if not rc:
                    self.last = (r.total_bytes, r.total_bytes)
                self.outcome = (rc, r, diag)
                _RUNNING_WARMS.discard(self)
            return self.outcome


class Warming:
    """A warm-up running in the library's own thread (cxs_warm_start), from
    Dataset.warm(background=True).  It holds the dataset open until it has
    ended.  running: still reading; progress: (bytes covered, total);
    wait(): blocks until it ends and returns warm()'s dict (or raises what
    warm() raises; Ctrl-C interrupts the wait, not the warm-up); stop():
    asks it to end (within one 64 MiB read) and waits, returning the dict
    if it had finished, None if it was cut short; a failure is raised by
    wait() only.  Any thread may call these.  Collected, it is stopped.  In
    a child forked while it ran it is not running, and wait() raises
    ChildProcessError (the warm-up is the parent's)."""

    def __init__(self, ds, flags):
        h = ds._h
        if h is None:
            raise ValueError("ctxshard: the dataset is closed")
        ptr, diag = c_void_p(), _n.Diag()
        rc = _lib.cxs_warm_start(h.ptr, flags, byref(ptr), byref(diag))
        if rc:
            _raise(rc, diag, what="warm")
        self._core, self._h, self.path = _WarmCore(ptr), h, ds.path
        h.warms.add(self._core)
        _RUNNING_WARMS.add(self._core)

    @property
    def running(self):
        return self._core.poll()[0]

    @property
    def progress(self):
        return self._core.poll()[1:]

    def _finish(self, stop):
        out = self._core.finish(stop)
        h = self._h
        if h is not None:
            h.warms.discard(self._core)
            self._h = None
        return out

    def wait(self):
        while self._core.poll()[0]:  # in steps, so that Ctrl-C and stop() get in
            time.sleep(0.01)
        return _warm_result(self.path, *self._finish(False))

    def stop(self):
        rc, r, diag = self._finish(True)
        return None if rc else _warm_result(self.path, rc, r, diag)

    def __del__(self):
        if getattr(self, "_core", None) is not None:
            self._finish(True)


def fetch(url, cache=None, cache_limit=None, progress=None):
    """Bring the dataset at url (http://, https://, s3://BUCKET/PREFIX) into
    the node-local cache and verify it, without opening it: what
    open(url) does first (Dataset says where the cache is and how its
    budget works).  progress(done, total) is called about every 100 ms of a
    download with the bytes the cache holds; a KeyboardInterrupt (or an
    exception) in it stops the download (what arrived is kept for the next
    fetch).  Returns {"dataset_bytes", "bytes_fetched", "seconds",
    "cached"}: cached is True when a verified copy was there already (only
    the manifest was fetched)."""
    url = _a.path("fetch", "url", url)
    opts = _n.OpenOpts(0, 0, None if cache is None else os.fsencode(_a.path("fetch", "cache",
                                                                           cache)),
                       0 if cache_limit is None else _a.size("fetch", "cache_limit",
                                                             cache_limit, 1))
    fn, raised = _progress_call(progress)
    info, diag = _n.FetchInfo(), _n.Diag()
    rc = _lib.cxs_url_fetch(os.fsencode(url), byref(opts), fn, None, byref(info), None,
                            byref(diag))
    if raised:
        raise raised[0]
    if rc == -errno.ECANCELED:  # a signal arrived as the callback began
        raise KeyboardInterrupt
    if rc:
        _raise(rc, diag, what="fetch")
    return {"dataset_bytes": info.dataset_bytes, "bytes_fetched": info.bytes_fetched,
            "seconds": info.seconds, "cached": bool(info.cached)}


def _progress_call(progress):
    """A PROGRESS_FN over progress(done, total) that turns an exception in
    it into a stop (1), kept to be raised once the C call has returned."""
    raised = []

    def tick(_user, done, total):
        try:
            if raised:
                return 1
            if progress is not None:
                progress(done, total)
            return 0
        except BaseException as e:  # noqa: BLE001 - re-raised after the C call
            raised.append(e)
            return 1

    return _n.PROGRESS_FN(tick), raised


def push(path, url, progress=None):
    """Upload the packed dataset at path to url (s3://BUCKET/PREFIX, signed
    with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; or an
    http(s):// server that takes PUT) so that readers never see part of
    it: verified first (a damaged dataset is not uploaded: CtxshardError),
    the shards four at a time, the manifest last.  progress(done, total)
    about every 100 ms with the bytes sent; an exception in it stops the
    upload before the manifest (and is raised).  Returns the bytes sent."""
    path = _a.path("push", "path", path)
    url = _a.path("push", "url", url)
    fn, raised = _progress_call(progress)
    sent, diag = c_uint64(), _n.Diag()
    rc = _lib.cxs_dataset_push(os.fsencode(path), os.fsencode(url), fn, None, byref(sent),
                               byref(diag))
    if raised:
        raise raised[0]
    if rc:
        _raise(rc, diag, what="push")
    return sent.value


def cache_dir(cache=None):
    """The cache directory URLs are fetched into (cache, or the default:
    CTXSHARD_CACHE, else $XDG_CACHE_HOME/ctxshard, else ~/.cache/ctxshard)."""
    buf = ctypes.create_string_buffer(4096)
    if _lib.cxs_cache_dir(None if cache is None else os.fsencode(cache), buf, len(buf)):
        raise ValueError("cache_dir: path too long")
    return os.fsdecode(buf.value)


def cache_entries(cache=None):
    """The datasets in the cache, least recently used first: dicts of url,
    dir, bytes, last_used (Unix seconds), complete, streamed (its metadata
    and the blocks streaming fetched), in_use."""
    out, diag = [], _n.Diag()

    def one(_user, e):
        e = e.contents
        out.append({"url": os.fsdecode(e.url), "dir": os.fsdecode(e.dir), "bytes": e.bytes,
                    "last_used": e.last_used, "complete": bool(e.complete),
                    "streamed": bool(e.streamed), "in_use": bool(e.in_use)})
        return 0

    rc = _lib.cxs_cache_list(None if cache is None else os.fsencode(cache), _n.CACHE_FN(one),
                             None, byref(diag))
    if rc:
        _raise(rc, diag, what="cache")
    return out


def cache_prune(limit, cache=None):
    """Evict the least recently used datasets not open in any process until
    the cache holds at most limit bytes (or a string like "100G"); returns
    the bytes freed.  OSError (EBUSY) when what is open keeps it above."""
    limit = _a.size("cache_prune", "limit", limit, 0)
    freed, diag = c_uint64(), _n.Diag()
    rc = _lib.cxs_cache_prune(None if cache is None else os.fsencode(cache), limit, byref(freed),
                              byref(diag))
    if rc:
        _raise(rc, diag, what="cache")
    return freed.value


class Dataset:
    """An open packed dataset (a directory, its manifest, or one shard file).

    cache_bytes: for a compressed dataset (``pack --compress zstd``), the
    memory kept for decoded chunks, shared by every thread (default 256 MiB;
    0 decodes on every read).  Compressed datasets serve gather(), the
    loaders and utterance() (a copy) as usual, but no zero-copy views:
    window() raises there.

    hugepage_budget: bytes (or a string like "4G") of anonymous memory open
    may use to copy the features and labels into transparent huge pages and
    serve them from there (faster random windows: fewer TLB misses); 0 (the
    default): none.  Open then reads and checks every byte against its
    section checksum; when the data does not fit, is compressed, or huge
    pages are off, the dataset serves from the mapping as usual and
    ``hugepages["reason"]`` says why (docs/python.md).

    path may be a URL: http://HOST/PATH, https://..., or s3://BUCKET/PREFIX
    (signed with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
    AWS_SESSION_TOKEN when set; AWS_REGION; AWS_ENDPOINT_URL for an
    S3-compatible server).  The dataset is then downloaded once into the
    node-local cache -- cache= (a directory; default CTXSHARD_CACHE, else
    $XDG_CACHE_HOME/ctxshard, else ~/.cache/ctxshard), within cache_limit=
    bytes (or a string like "50G"; default CTXSHARD_CACHE_LIMIT, else no
    limit; least recently used datasets not open anywhere are evicted) --
    every checksum of the copy verified, and read from there; the
    processes of a node share it (each file downloaded once).

    stream=True (a URL): when the cache holds no complete copy, only the
    metadata is fetched (every section but the features); the features
    come block by block as a Loader with shuffle="block" reads them, each
    block checked against its block sum before it is served, and stay in
    the cache while cache_limit allows (blocks no reader holds are evicted
    past it).  Such a dataset serves that loader only: window(), gather(),
    utterance features, the UtteranceLoader, warm() and verify() raise
    (open it without stream to read it otherwise).  streamed says whether
    it was; bytes_fetched counts the feature bytes downloaded since."""

    def __init__(self, path, cache_bytes=None, hugepage_budget=0, cache=None, cache_limit=None,
                 stream=False):
        path = _a.path("open", "path", path)
        cache_bytes = _a.optional_integer("open", "cache_bytes", cache_bytes, 0)
        hugepage_budget = _a.size("open", "hugepage_budget", hugepage_budget, 0)
        cache = None if cache is None else _a.path("open", "cache", cache)
        cache_limit = None if cache_limit is None else _a.size("open", "cache_limit",
                                                               cache_limit, 1)
        stream = _a.flag("open", "stream", stream)
        ptr = c_void_p()
        diag = _n.Diag()
        self._stream = stream
        self._cache_bytes = cache_bytes
        self._hugepage_budget = hugepage_budget
        self._cache, self._cache_limit = cache, cache_limit
        # None: the library's default (0 in C); 0 here: no cache (CXS_CACHE_OFF)
        opts = _n.OpenOpts(0 if cache_bytes is None else cache_bytes or _n.CACHE_OFF,
                           hugepage_budget, None if cache is None else os.fsencode(cache),
                           cache_limit or 0, _n.OPEN_STREAM if stream else 0)
        if _lib.cxs_is_url(os.fsencode(path)):
            # the download checks for Ctrl-C every 100 ms (a KeyboardInterrupt
            # stops it, what arrived kept for the next open)
            fn, raised = _progress_call(None)
            fi = _n.FetchInfo()
            rc = _lib.cxs_url_fetch(os.fsencode(path), byref(opts), fn, None, byref(fi),
                                    byref(ptr), byref(diag))
            self._streamed = bool(not rc and fi.streamed)
            if not rc and fi.offline:
                import warnings
                warnings.warn(f"{path}: the server cannot be reached: opened the cache's copy as "
                              "it is, not checked against the server's manifest", stacklevel=2)
            if raised:
                raise raised[0]
            if rc == -errno.ECANCELED:  # a signal arrived as the callback began
                raise KeyboardInterrupt
        else:
            rc = _lib.cxs_dataset_open_ex(os.fsencode(path), byref(opts), byref(ptr),
                                          byref(diag))
        if rc:
            _raise(rc, diag)
        self.path = os.fspath(path)
        self._h = _Handle(ptr)
        info = _n.Info()
        _lib.cxs_dataset_info(ptr, byref(info))
        self._info = info
        self._vocab = None
        self._labels = None
        self._ids = None

    # ---- lifetime ---------------------------------------------------------
    @property
    def _ptr(self):
        if self._h is None:
            raise ValueError("ctxshard: the dataset is closed")
        return self._h.ptr

    def close(self):
        """Close the dataset.  Views taken from it stay valid (they hold the
        mapping) until they are garbage-collected."""
        self._h = None

    @property
    def closed(self):
        return self._h is None

    @property
    def url(self):
        """The URL the dataset was opened from, or None (a local path)."""
        u = c_char_p()
        return os.fsdecode(u.value) if _lib.cxs_dataset_url(self._ptr, byref(u), None) == 1 \
            else None

    @property
    def streamed(self):
        """True when open to stream (stream=True, and the cache had no complete
        copy): the features come as a block Loader reads them."""
        self._ptr  # (closed: ValueError)
        return self.__dict__.get("_streamed", False)

    @property
    def bytes_fetched(self):
        """Streamed: the feature bytes this process downloaded since open (the
        blocks the cache lacked); 0 otherwise."""
        return int(_lib.cxs_dataset_fetched(self._ptr))

    @property
    def cached_at(self):
        """Opened from a URL: the directory of its copy in the cache; else None."""
        loc = c_char_p()
        if _lib.cxs_dataset_url(self._ptr, None, byref(loc)) != 1:
            return None
        return os.path.dirname(os.fsdecode(loc.value))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def hugepages(self):
        """What hugepage_budget did: {"bytes": the copy's size (0: served
        from the mapping), "huge_bytes": of it in huge pages, "reason": why
        there is no copy ("" when there is, or none was asked for)}."""
        hi = _n.HugepageInfo()
        _lib.cxs_dataset_hugepages(self._ptr, byref(hi))
        return {"bytes": hi.bytes, "huge_bytes": hi.huge_bytes,
                "reason": hi.reason.decode("utf-8", "replace")}

    def __getstate__(self):  # reopened by path in another process
        return {"path": self.path, "cache_bytes": self._cache_bytes,
                "hugepage_budget": self._hugepage_budget, "cache": self._cache,
                "cache_limit": self._cache_limit, "stream": self._stream}

    def __setstate__(self, state):
        self.__init__(state["path"], state.get("cache_bytes"), state.get("hugepage_budget", 0),
                      state.get("cache"), state.get("cache_limit"), state.get("stream", False))

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self)} frames"
        return f"<ctxshard.Dataset {self.path!r}: {state}>"

    # ---- the page cache ------------------------------------------------------
    @property
    def nbytes(self):
        """Bytes of all the dataset's files (what warming reads)."""
        return self._info.total_bytes

    def fits_in_memory(self):
        """True when all the dataset's files fit in the memory available
        (memory_available()['available'])."""
        return self._info.total_bytes <= memory_available()["available"]

    def warm(self, force=False, progress=None, stop=None, skip_cached=False, background=False):
        """Read every file of the dataset into the page cache, sequentially
        in large blocks (the disk's rate, instead of one random fault per
        window during a cold first epoch).  Returns a dict: total_bytes,
        cached_before, bytes_read, seconds, fits, available.  When the part
        not yet cached does not fit in the memory available it reads nothing
        and raises MemoryError naming the block sampler, unless force=True.
        progress(done, total) is called as it goes; stop, a
        threading.Event, cancels it (InterruptedError).  skip_cached=True
        reads only the ranges not all in the page cache already (bytes_read
        then counts those): warming a cached dataset costs a residency check
        instead of a copy of it.  With block sums (format 1.3) every block
        read is checked against its sum (skip_cached leaves the ranges it
        skips unchecked): a damaged one raises CtxshardError naming it and
        its utterances.  Releases the GIL while reading.

        background=True: returns at once a ctxshard.Warming, the warm-up
        running in a thread of the library's at the lowest CPU priority
        (Loader(prefetch=True) starts one, with skip_cached); its wait()
        returns the dict or raises as above, stop() cancels it.  progress
        and stop do not apply (Warming.progress and Warming.stop())."""
        force = _a.flag("warm", "force", force)
        skip_cached = _a.flag("warm", "skip_cached", skip_cached)
        flags = (_n.WARM_FORCE if force else 0) | (_n.WARM_SKIP_CACHED if skip_cached else 0)
        if _a.flag("warm", "background", background):
            if progress is not None or stop is not None:
                raise ValueError("warm: progress= and stop= apply to a warm-up in this thread; "
                                 "with background=True ask the Warming it returns (progress, "
                                 "stop())")
            return Warming(self, flags)
        h = self._h  # held: the dataset stays open until this returns
        if h is None:
            raise ValueError("ctxshard: the dataset is closed")

        def tick(_user, done, total):
            if progress is not None:
                progress(done, total)
            return 1 if stop is not None and stop.is_set() else 0

        fn = _n.PROGRESS_FN(tick)
        r, diag = _n.WarmResult(), _n.Diag()
        rc = _lib.cxs_dataset_warm(h.ptr, flags, fn, None, byref(r), byref(diag))
        return _warm_result(self.path, rc, r, diag)

    # ---- description -------------------------------------------------------
    def __len__(self):
        """Number of frames (= samples)."""
        return self._info.num_frames

    @property
    def num_frames(self):
        return self._info.num_frames

    @property
    def num_utterances(self):
        return self._info.num_utterances

    @property
    def num_shards(self):
        return self._info.num_shards

    @property
    def dim(self):
        return self._info.dim

    @property
    def guard(self):
        """Zero rows around every utterance: window(i, k) is zero-copy for k <= guard."""
        return self._info.guard

    @property
    def dtype(self):
        """Stored feature type: 'float32', 'float16', 'bfloat16', or the
        coded 'q8' and 'q16' (Kaldi's compressed matrices; every read
        decodes them into float32)."""
        return _DTYPES[self._info.dtype][0]

    @property
    def compressed(self):
        """True for zstd-compressed features (no zero-copy views)."""
        return self._info.compression == _n.COMPRESSION_ZSTD

    def input_size(self, context):
        """Features per window for context k: (2k+1)*dim — the first layer's width."""
        k = _a.integer("input_size", "context", context, 0, 1000000)
        return (2 * k + 1) * self._info.dim

    @property
    def info(self):
        i = self._info
        return {f: getattr(i, f) for f, _ in i._fields_}

    @property
    def vocab(self):
        """The phoneme list; label l is vocab[l].  Empty for features only."""
        if self._vocab is None:
            out = []
            for i in range(self._info.vocab_size):
                p, n = c_void_p(), c_size_t()
                _lib.cxs_dataset_vocab(self._ptr, i, byref(p), byref(n))
                out.append(ctypes.string_at(p.value, n.value).decode("utf-8"))
            self._vocab = out
        return self._vocab

    @property
    def num_classes(self):
        return self._info.vocab_size

    @property
    def stats(self):
        """Per-dimension mean/var and the label histogram (None for a shard alone)."""
        st = _n.Stats()
        _lib.cxs_dataset_stats(self._ptr, byref(st))
        if not st.mean:
            return None
        D, V = self._info.dim, self._info.vocab_size
        addr = ctypes.cast
        mean = _view(self._h, addr(st.mean, c_void_p).value, (D,), "<f8")
        var = _view(self._h, addr(st.var, c_void_p).value, (D,), "<f8")
        lc = (_view(self._h, addr(st.label_counts, c_void_p).value, (V,), "<u8")
              if st.label_counts else None)
        return Stats(st.count, mean, var, lc, self.path, self.pack_normalize)

    @property
    def pack_normalize(self):
        """How the features were normalised at pack time: "none", or
        "utterance" (pack --normalize utterance: each utterance by its own
        mean and variance, so the stored statistics are of normalised
        features)."""
        return "utterance" if self._info.normalize == _n.NORM_UTTERANCE else "none"

    @property
    def identity(self):
        """The dataset's identity, an int: the checksum of its manifest's
        header, which vouches for every byte (a copy has the same, another
        pack another).  A dataset reopened by path (a pickled FrameDataset
        in a worker) is checked against it."""
        return int(_lib.cxs_dataset_identity(self._ptr))

    @property
    def num_skipped(self):
        """Utterances left out at pack time (on_error="skip")."""
        return int(self._info.num_skipped)

    @property
    def incomplete(self):
        """True for a features-only dataset (a test split) that lost
        utterances at pack time: predictions over it have fewer rows than
        the raw split has frames, and every frame after a gap shifts.  The
        torch adapters warn about it (once per dataset); ds.skipped names
        them; `pack --fill-nonfinite` keeps utterances whose only problem
        is NaN or infinite values."""
        return self._info.vocab_size == 0 and self._info.num_skipped > 0

    @property
    def skipped(self):
        """The pack-time skip report: [(id, reason)]."""
        p, n = c_void_p(), c_size_t()
        _lib.cxs_dataset_skipped(self._ptr, byref(p), byref(n))
        if not n.value:
            return []
        text = ctypes.string_at(p.value, n.value).decode("utf-8", "replace")
        # LF only (spec 5.5): str.splitlines would also cut at U+2028 and
        # other separators a reason may hold
        return [tuple(line.split("\t", 1)) for line in text.split("\n") if line]

    def verify(self):
        """Re-hash every byte and check every padding byte.  Returns the
        report, a dict of shards, utterances, frames, bytes and seconds;
        raises CtxshardError naming the first problem (file, section,
        offset) when the dataset is damaged."""
        import time
        diag = _n.Diag()
        t0 = time.monotonic()
        rc = _lib.cxs_dataset_verify(self._ptr, None, None, byref(diag))
        if rc:
            _raise(rc, diag)
        i = self._info
        return {"ok": True, "path": self.path, "shards": i.num_shards,
                "utterances": i.num_utterances, "frames": i.num_frames,
                "bytes": i.total_bytes, "seconds": time.monotonic() - t0}

    # ---- frames and utterances ----------------------------------------------
    def _utt(self, u, func="utterance", data=True):
        """data=False: the id, first frame and length only (the blocks of its
        features and labels are neither read nor checked)."""
        u = _a.index(func, "u", u, self._info.num_utterances, "utterances")
        ut = _n.Utterance()
        why = _n.Diag()
        rc = _lib.cxs_dataset_utterance_ex(self._ptr, u, 0 if data else 1, byref(ut), byref(why))
        if rc == _n.E_TRUNCATED:
            # its first frame's read gives the message that names the shard
            diag = _n.Diag()
            row = np.empty(self._info.dim * 4, dtype=np.uint8)
            if _lib.cxs_dataset_read_features_ex(self._ptr, u, 0, 1, row.ctypes.data,
                                                 byref(diag)) == 0:
                diag.message = (f"{self.path}: {func}({u}): a shard was truncated since the "
                                "dataset was opened").encode()
            _raise(rc, diag, what=func)
        if rc:
            _raise(rc, why, what=func)
        return ut

    def utterance(self, u):
        """(id, features [T, dim], labels view [T] or None) of utterance u:
        the features are a zero-copy view, or for a compressed dataset a
        fresh read-only array decoded from its chunks, or for a coded one
        (q8, q16) a fresh read-only float32 array of its decoded values."""
        ut = self._utt(u)
        typestr = _DTYPES[self._info.dtype][1]
        if typestr is None:
            feats = np.empty((ut.num_frames, self._info.dim), dtype=np.float32)
            length, diag = np.zeros(1, np.int64), _n.Diag()
            uu = np.array([u], np.uint64)
            rc = _lib.cxs_dataset_pad_batch_ex(self._ptr, uu.ctypes.data, 1, ut.num_frames, 0,
                                               None, feats.ctypes.data, length.ctypes.data,
                                               None, byref(diag))
            if rc:
                _raise(rc, diag, what=f"utterance {u}")
            feats.flags.writeable = False
        elif ut.features:
            feats = _view(self._h, ut.features, (ut.num_frames, self._info.dim), typestr)
        else:
            feats = np.empty((ut.num_frames, self._info.dim), dtype=np.dtype(typestr))
            diag = _n.Diag()
            rc = _lib.cxs_dataset_read_features_ex(self._ptr, int(u), 0, ut.num_frames,
                                                   feats.ctypes.data, byref(diag))
            if rc:
                _raise(rc, diag, what=f"utterance {u}")
            feats.flags.writeable = False
        # the id is read from the mapping by this process (after the decode,
        # which reports a shard truncated since open by name)
        uid = ctypes.string_at(ut.id, ut.id_len).decode("utf-8", "replace")
        labels = None
        if ut.labels:
            labels = _view(self._h, ut.labels, (ut.num_frames,),
                           "|u1" if self._info.label_width == 1 else "<u2")
        return uid, feats, labels

    @property
    def has_frame_labels(self):
        """True when every frame has a label (LABELS): the frame
        classifier's target.  False for features only and for a dataset of
        label sequences only."""
        return bool(self._info.label_width)

    @property
    def has_label_seqs(self):
        """True when every utterance has a label sequence (label_seq(u)):
        the phoneme sequence of a sequence model's target (CTC, attention),
        of any length, not tied to the frames (format 1.2)."""
        return bool(self._info.label_seqs)

    @property
    def max_seq_length(self):
        """The longest label sequence, in symbols (0 without sequences)."""
        return int(self._info.max_seq_length)

    def label_seq(self, u):
        """Label sequence of utterance u as a new int64 array of vocabulary
        indices ([SOS]/[EOS] are never in it).  ValueError when the dataset
        has none (has_label_seqs), IndexError when u is out of range."""
        if not self._info.label_seqs:
            _raise(_n.E_NO_SEQUENCES, what=f"label_seq({u})")
        u = _a.index("label_seq", "u", u, self._info.num_utterances, "utterances")
        n = c_uint32()
        out = np.empty(int(self._info.max_seq_length), dtype=np.int64)
        rc = _lib.cxs_dataset_label_seq(self._ptr, u, out.ctypes.data, len(out), byref(n))
        if rc:
            _raise(rc, what=f"label_seq({u})")
        return out[:n.value].copy()

    def utterance_frames(self, u):
        """(first global frame, number of frames) of utterance u."""
        ut = self._utt(u, "utterance_frames", data=False)
        return ut.first_frame, ut.num_frames

    @property
    def ids(self):
        """Utterance ids, in order."""
        if self._ids is None:
            out = []
            for u in range(self._info.num_utterances):
                ut = self._utt(u, data=False)
                out.append(ctypes.string_at(ut.id, ut.id_len).decode("utf-8", "replace"))
            self._ids = out
        return self._ids

    def locate(self, frame):
        """(utterance, offset within it) of a global frame."""
        u, off = c_uint64(), c_uint64()
        rc = _lib.cxs_dataset_locate(self._ptr, self._frame(frame, "locate", "frame"), byref(u),
                                     byref(off))
        if rc:
            _raise(rc, what=f"frame {frame}")
        return u.value, off.value

    def _frame(self, i, func, name="i"):
        return _a.index(func, name, i, self._info.num_frames, "frames")

    def window(self, i, k):
        """Zero-copy window of frame i: a read-only view [2k+1, dim] of the
        stored dtype (bfloat16 as uint16 bits), zero rows past the
        utterance's borders.  Needs k <= guard; use gather() for any k.
        The zero rows are the stored guard rows, checked: a damaged one
        raises CtxshardError instead of being served."""
        i = self._frame(i, "window")
        k = _a.integer("window", "k", k, 0, None)
        if self.compressed:
            raise ValueError("window: a compressed dataset has no zero-copy views; "
                             "use gather() or utterance()")
        if _DTYPES[self._info.dtype][1] is None:
            raise ValueError(f"window: the dataset stores {self.dtype} codes, decoded when "
                             "read: it has no zero-copy views; use gather() or utterance()")
        if self.streamed:
            raise ValueError(f"window: {self.url}: the dataset is open to stream (its features "
                             "come as a Loader with shuffle=\"block\" reads them); open it "
                             "without stream to read them otherwise")
        if k > self._info.guard:
            raise ValueError(f"window: k={k} exceeds the guard ({self._info.guard}); "
                             "use gather(), which pads any k")
        p = c_void_p()
        rc = _lib.cxs_dataset_window(self._ptr, i, k, byref(p))
        if rc == _n.E_CORRUPT:
            u, _ = self.locate(i)
            raise CtxshardError(rc, f"{self.path}: window({i}, {k}): utterance "
                                f"{self.utterance(u)[0]} (number {u}): a guard row the window "
                                "spans is not zero: its shard's FEATURES are damaged (ctxshard "
                                "verify); not served (gather() pads with its own zeros)")
        if rc:
            _raise(rc, what=f"window({i}, {k})")
        return _view(self._h, p.value, (2 * k + 1, self._info.dim), _DTYPES[self._info.dtype][1])

    @property
    def labels(self):
        """Labels of all frames (uint8, or uint16 beyond 256 symbols): a
        zero-copy view for a one-shard dataset; with several shards, whose
        label sections are separate in memory, one read-only copy made on
        first use (1 byte per frame).  shard_labels(s) is always zero-copy."""
        if self._labels is None:
            if not self._info.label_width:
                raise ValueError(self._no_frame_labels())
            if self._info.num_shards == 1:
                self._labels = self.shard_labels(0)
            else:
                a = np.concatenate([self.shard_labels(s) for s in range(self._info.num_shards)])
                a.flags.writeable = False
                self._labels = a
        return self._labels

    def shard_labels(self, s):
        """Zero-copy view of shard s's labels."""
        s = _a.index("shard_labels", "s", s, self._info.num_shards, "shards")
        if not self._info.label_width:
            raise ValueError(self._no_frame_labels())
        ptr, first, n = c_void_p(), c_uint64(), c_uint64()
        rc = _lib.cxs_dataset_shard_labels(self._ptr, s, byref(ptr), byref(first), byref(n))
        if rc:
            _raise(rc, what=f"shard_labels({s})")
        return _view(self._h, ptr.value, (n.value,),
                     "|u1" if self._info.label_width == 1 else "<u2")

    def _no_frame_labels(self):
        if self._info.label_seqs:
            return ("ctxshard: label sequences only: no per-frame labels (label_seq(u) gives "
                    "an utterance's sequence)")
        return "ctxshard: features-only dataset: no labels"

    def label(self, i):
        v = c_uint32()
        f = self._frame(i, "label")
        rc = _lib.cxs_dataset_label(self._ptr, f, byref(v))
        if rc == _n.E_CORRUPT:
            self._label_damage(np.array([f], dtype=np.uint64), f"label({i})")
        if rc:
            _raise(rc, what=f"label({i})")
        return v.value

    def _label_damage(self, f, what):
        """A label outside the vocabulary among frames f: raise the error
        the gather gives, which names the shard, the utterance and the frame."""
        x = np.empty((f.size, self._info.dim), dtype=np.float32)
        y = np.empty(f.size, dtype=np.int64)
        diag = _n.Diag()
        rc = _lib.cxs_dataset_gather_ex(self._ptr, f.ctypes.data, f.size, 0, 0, None, 1,
                                        x.ctypes.data, y.ctypes.data, byref(diag))
        _raise(rc or _n.E_CORRUPT, diag, what=what)

    # ---- gather --------------------------------------------------------------
    def _frames_array(self, frames, func):
        if isinstance(frames, (str, bytes)) or np.isscalar(frames):
            raise TypeError(f"{func}: frames={frames!r} is a {type(frames).__name__}, expected "
                            "a sequence or 1-D array of frame numbers")
        f = np.asarray(frames)
        if f.ndim != 1:
            f = f.reshape(-1)
        if f.size == 0:
            return np.empty(0, dtype=np.uint64)
        if f.dtype.kind not in "iu":
            raise TypeError(f"{func}: frames hold {f.dtype} values, expected integers "
                            "(frame numbers)")
        n = self._info.num_frames
        if f.size and (f.min() < 0 or f.max() >= n):
            bad = f[(f < 0) | (f >= n)][0]
            raise IndexError(f"{func}: frame {bad} is out of range: expected 0..{n - 1} "
                             f"(the dataset has {n} frames)")
        return np.ascontiguousarray(f, dtype=np.uint64)

    def _norm(self, normalize, func="gather", stacklevel=4):
        """What normalize= asks of this dataset: (flags, native Norm or None,
        what the Norm points to -- keep it alive).  See normalization()."""
        mode, st = normalization(func, self, normalize, stacklevel)
        if mode is None:
            return 0, None, None
        if mode == "own":
            return _n.GATHER_NORMALIZE, None, None
        mean, var = st
        dp = ctypes.POINTER(ctypes.c_double)
        nrm = _n.Norm(self.dim, mean.ctypes.data_as(dp), var.ctypes.data_as(dp))
        return _n.GATHER_NORMALIZE, nrm, st

    def gather(self, frames, k, out=None, normalize=False, labels=False, threads=None):
        """Windows of the given frames as float32 [n, (2k+1)*dim], any k
        (zero padding past utterance borders), optionally normalised
        (spec/format.md section 7.4; padding stays 0).  normalize: False;
        train_ds (the training split's Dataset), train_ds.stats or a
        (mean, var) pair -- normalise every split, dev and test included,
        with the training split's statistics; ds itself for its own
        statistics (on the training split); True also means the dataset's
        own, with a warning (once per dataset) that dev and test want
        train's.  Into `out` when given (a C-contiguous float32 array of
        that shape).  With labels=True returns (x, y) with y int64 [n].
        threads: gather threads (default: up to 4 for large batches)."""
        f = self._frames_array(frames, "gather")
        k = _a.integer("gather", "k", k, 0, 1000000)
        labels = _a.flag("gather", "labels", labels)
        threads = _a.optional_integer("gather", "threads", threads, 1, 256)
        if labels and not self._info.label_width:
            raise ValueError(f"gather: labels=True, but {self.path} has no labels (features "
                             "only, like a test split): pass labels=False")
        flags, nrm, keep = self._norm(normalize)
        n, W = f.size, self.input_size(k)
        if out is None:
            out = np.empty((n, W), dtype=np.float32)
        elif (not isinstance(out, np.ndarray) or out.dtype != np.float32
              or not out.flags.c_contiguous or out.size != n * W or not out.flags.writeable):
            raise ValueError(f"gather: out must be a writable C-contiguous float32 array of "
                             f"{n}x{W}, not {getattr(out, 'dtype', type(out).__name__)} "
                             f"{getattr(out, 'shape', '')}")
        y = np.empty(n, dtype=np.int64) if labels else None
        if threads is None:
            threads = default_threads() if n >= 4096 else 1
        diag = _n.Diag()
        rc = _lib.cxs_dataset_gather_ex(self._ptr, f.ctypes.data, n, int(k), flags,
                                        ctypes.byref(nrm) if nrm is not None else None,
                                        int(threads), out.ctypes.data,
                                        y.ctypes.data if labels else None, byref(diag))
        del keep
        if rc:
            _raise(rc, diag, what="gather")
        return (out, y) if labels else out

    def labels_of(self, frames):
        """Labels (int64) of the given frames."""
        f = self._frames_array(frames, "labels_of")
        if not self._info.label_width:
            raise ValueError("labels_of: " + self._no_frame_labels()[len("ctxshard: "):])
        y = np.empty(f.size, dtype=np.int64)
        rc = _lib.cxs_dataset_labels_of(self._ptr, f.ctypes.data, f.size, y.ctypes.data)
        if rc == _n.E_CORRUPT:
            self._label_damage(f, "labels_of")
        if rc:
            _raise(rc, what="labels_of")
        return y


_warned_own_stats = set()  # normalize=True warns once per dataset (by identity)


_warned_incomplete = set()  # features-only datasets that lost utterances, by identity


def warn_if_incomplete(func, ds, stacklevel=3):
    """Warn, once per dataset, that ds is a features-only split (a test
    split) with utterances left out at pack time: whatever is predicted
    over it has fewer rows than the raw split has frames."""
    if not ds.incomplete or ds.identity in _warned_incomplete:
        return
    _warned_incomplete.add(ds.identity)
    ids = [i for i, _ in ds.skipped]
    shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
    import warnings
    warnings.warn(
        f"ctxshard: {func}: {ds.path} is a features-only split (a test split?) with "
        f"{ds.num_skipped} utterance{'s' if ds.num_skipped != 1 else ''} left out at pack "
        f"time ({shown}): predictions over it have fewer rows than the raw split has frames, "
        "and every frame after a gap is shifted.  Pack it again with the files fixed, or "
        "with fill_nonfinite=True (ctxshard pack --fill-nonfinite) to keep utterances whose "
        "only problem is NaN or infinite values; ds.skipped lists them.",
        UserWarning, stacklevel=stacklevel)


def _same_pack_normalize(func, ds, src, mode):
    if mode != ds.pack_normalize:
        def how(path, m):
            return (f"{path} was packed with --normalize utterance" if m == "utterance"
                    else f"{path} was packed without it")
        raise ValueError(
            f"{func}: the statistics of {src} cannot normalise {ds.path}: "
            f"{how(src, mode)}, {how(ds.path, ds.pack_normalize)} (statistics of "
            "per-utterance normalised features do not describe the others); pack the "
            "splits with the same --normalize")


def _same_dataset(a, b):
    if a is b:
        return True
    try:
        return os.path.samefile(a.path, b.path)
    except OSError:
        return False


def normalization(func, ds, normalize, stacklevel=3):
    """What normalize= asks of dataset ds, checked for func: (None, None)
    for no normalisation; ("own", None) for ds's own stored statistics;
    ("given", (mean, var)) with float64 arrays of ds.dim values.

    normalize may be False (or None), True (ds's own statistics, with a
    warning once per dataset: every split should be normalised with the
    training split's), a Dataset (its statistics: the training split's;
    ds itself means its own, without a warning), a Stats (ds.stats) or a
    (mean, var) pair of arrays.  Statistics of a dataset packed with
    another --normalize than ds are refused: those of per-utterance
    normalised features do not describe raw ones, nor the reverse."""
    if normalize is None or normalize is False or (isinstance(normalize, np.bool_) and
                                                   not normalize):
        return None, None
    if normalize is True or isinstance(normalize, np.bool_):
        if ds.stats is None:
            raise ValueError(f"{func}: normalize=True, but {ds.path} has no stored statistics "
                             "(a shard opened alone): open the dataset directory, or pass "
                             "normalize=train_ds")
        if ds.identity not in _warned_own_stats:
            _warned_own_stats.add(ds.identity)
            import warnings
            warnings.warn(
                f"ctxshard: {func}(normalize=True) normalises {ds.path} by its own statistics. "
                "Normalise every split (train, dev, test) with the training split's: "
                "normalize=train_ds (the training Dataset, or train_ds.stats).  On the "
                "training split itself, normalize=ds says so and silences this warning.",
                UserWarning, stacklevel=stacklevel)
        return "own", None
    src = None
    if isinstance(normalize, Dataset):
        if _same_dataset(normalize, ds):
            if ds.stats is None:
                raise ValueError(f"{func}: normalize=ds, but {ds.path} has no stored "
                                 "statistics (a shard opened alone): open the dataset directory")
            return "own", None
        src = normalize.path
        st = normalize.stats
        if st is None:
            raise ValueError(f"{func}: normalize={normalize!r} has no stored statistics (a "
                             "shard opened alone): open the dataset directory")
        _same_pack_normalize(func, ds, normalize.path, normalize.pack_normalize)
        mean, var = st.mean, st.var
    elif isinstance(normalize, Stats):
        if normalize.pack_normalize is not None:
            _same_pack_normalize(func, ds, normalize.source, normalize.pack_normalize)
        mean, var = normalize.mean, normalize.var
    elif isinstance(normalize, (tuple, list)) and len(normalize) == 2:
        mean, var = normalize
    else:
        raise TypeError(f"{func}: normalize={_a._show(normalize)} is a "
                        f"{type(normalize).__name__}, expected True, False, a Dataset (the "
                        "training split: normalize=train_ds), its .stats, or a (mean, var) "
                        "pair of arrays")
    try:
        mean = np.ascontiguousarray(mean, dtype=np.float64).reshape(-1)
        var = np.ascontiguousarray(var, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise TypeError(f"{func}: normalize= (mean, var) must be two arrays of numbers, one "
                        f"value per dimension ({ds.dim})") from None
    if mean.size != ds.dim or var.size != ds.dim:
        what = f"{src}'s statistics" if src else "the statistics given"
        raise ValueError(f"{func}: normalize= {what} have {mean.size} means and {var.size} "
                         f"variances, but {ds.path} has dim {ds.dim}: the statistics must "
                         "match the features in dimension (use those of the training split "
                         "of the same features)")
    if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all()):
        raise ValueError(f"{func}: normalize= means and variances must be finite, and "
                         "variances >= 0")
    return "given", (mean, var)


def open(path, cache_bytes=None, hugepage_budget=0, cache=None,  # noqa: A001 - the entry point
         cache_limit=None, stream=False):
    """Open a packed dataset (directory, manifest or one shard file, or the
    URL of a dataset directory); cache_bytes, hugepage_budget, cache,
    cache_limit, stream: see Dataset."""
    return Dataset(path, cache_bytes, hugepage_budget, cache, cache_limit, stream)


class Sampler:
    """Stateless sampler over a dataset: get(epoch, pos, n) -> frames.

    kind: SEQUENTIAL, SHUFFLE (a seeded per-epoch permutation in O(1)
    memory), WEIGHTED (with replacement, inverse class frequency by
    default, or class_weights) or BLOCK (a per-epoch permutation drawn from
    a few blocks of whole utterances at a time, for data larger than
    memory: memory is the page cache it may use, bytes or a string like
    '2G', required; blocks, 1..1024, how many are drawn from at once,
    default 8).  rank/world_size partition every epoch like torch's
    DistributedSampler (pad by wrapping, or drop_last).  origin: the global
    position where every epoch starts, to resume a run saved with another
    number of ranks (rank r then sees origin + r, origin + r + world_size,
    ...)."""

    def __init__(self, dataset, kind=SHUFFLE, seed=0, rank=0, world_size=1, drop_last=False,
                 num_samples=0, class_weights=None, memory=None, blocks=None, origin=0):
        f = "Sampler"
        if not isinstance(dataset, Dataset):
            raise TypeError(f"{f}: dataset={dataset!r} is a {type(dataset).__name__}, expected "
                            "a ctxshard.Dataset (ctxshard.open(path))")
        kind = _a.integer(f, "kind", kind, SEQUENTIAL, BLOCK,
                          "ctxshard.SEQUENTIAL, SHUFFLE, WEIGHTED or BLOCK")
        seed = _a.integer(f, "seed", seed, 0, 2**64 - 1)
        world_size = _a.integer(f, "world_size", world_size, 1, 2**32 - 1)
        rank = _a.integer(f, "rank", rank, 0, world_size - 1,
                          f"0..world_size-1 = 0..{world_size - 1}")
        drop_last = _a.flag(f, "drop_last", drop_last)
        num_samples = _a.integer(f, "num_samples", num_samples, 0, None,
                                 "0 (one epoch's worth) or a positive count")
        origin = _a.integer(f, "origin", origin, 0, None,
                            "0, or the global position to resume from")
        if kind == WEIGHTED and not dataset.has_frame_labels:
            raise ValueError(f"{f}: weighted sampling needs per-frame labels (it balances the "
                             "classes), and the dataset has "
                             + ("none (label sequences only)" if dataset.has_label_seqs else
                                "no labels (features only, like a test split)"))
        if class_weights is not None and kind != WEIGHTED:
            raise ValueError(f"{f}: class_weights apply to kind=WEIGHTED only")
        if kind == BLOCK:
            if memory is None:
                raise ValueError(f"{f}: kind=BLOCK needs memory=, the page cache the order may "
                                 "use (bytes, or a string like '2G'); the order depends on it")
            memory = _a.size(f, "memory", memory)
            blocks = _a.optional_integer(f, "blocks", blocks, 1, 1024)
        elif memory is not None or blocks is not None:
            raise ValueError(f"{f}: memory and blocks apply to kind=BLOCK only")
        self.dataset = dataset
        self._weights = None
        opts = _n.SamplerOpts(kind, seed, rank, world_size, int(drop_last), num_samples, None,
                              origin, memory or 0, blocks or 0)
        if class_weights is not None:
            w = np.ascontiguousarray(class_weights, dtype=np.float64)
            if w.shape != (dataset.num_classes,):
                raise ValueError(f"{f}: class_weights needs {dataset.num_classes} values (one "
                                 f"per class), got shape {w.shape}")
            if not np.all(np.isfinite(w)) or np.any(w < 0) or not np.any(w > 0):
                raise ValueError(f"{f}: class_weights must be finite, >= 0 and not all 0")
            self._weights = w
            opts.class_weights = w.ctypes.data_as(ctypes.POINTER(ctypes.c_double))
        ptr, diag = c_void_p(), _n.Diag()
        rc = _lib.cxs_sampler_create_ex(dataset._ptr, byref(opts), byref(ptr), byref(diag))
        if rc in (_n.E_RANGE, _n.E_INVALID):  # a budget too small, an origin past the end
            msg = diag.message.decode("utf-8", "replace") or f"{f}: {_lib.cxs_strerror(rc).decode()}"
            if kind == BLOCK and rc == _n.E_RANGE:
                i = dataset._info
                row = i.dim * _DTYPES[i.dtype][2]
                least = (i.max_length + i.guard) * row * ((blocks or 8) + 1)
                msg += (f".  Give memory={least} ({least / 2**20:.1f} MiB) or more, or fewer "
                        "blocks=")
            raise ValueError(msg)
        if rc:
            _raise(rc, diag, what="sampler")
        self._ptr = ptr
        self._handle = dataset._h  # the dataset must outlive the sampler
        self.kind, self.seed, self.rank, self.world_size = kind, seed, rank, world_size
        self.drop_last, self.origin, self.num_samples = drop_last, origin, num_samples
        self.memory, self.blocks = memory, (blocks or 8) if kind == BLOCK else None

    @property
    def epoch_samples(self):
        """Samples of one epoch over all ranks: the global order's length
        (frames, or num_samples for WEIGHTED)."""
        if self.kind == WEIGHTED and self.num_samples:
            return self.num_samples
        return self.dataset.num_frames

    @property
    def block_bytes(self):
        """BLOCK: bytes of one block, memory / (blocks + 1); None otherwise."""
        return _lib.cxs_sampler_block_bytes(self._ptr) if self.kind == BLOCK else None

    def num_blocks(self, epoch=0):
        """BLOCK: blocks of that epoch; None otherwise."""
        epoch = _a.integer("Sampler.num_blocks", "epoch", epoch, 0, 2**64 - 1)
        return _lib.cxs_sampler_num_blocks(self._ptr, epoch) if self.kind == BLOCK else None

    def __len__(self):
        return _lib.cxs_sampler_length(self._ptr)

    def get(self, epoch, pos=0, n=None):
        """Frames at positions pos .. pos+n-1 of this rank's order in epoch."""
        epoch = _a.integer("Sampler.get", "epoch", epoch, 0, 2**64 - 1)
        pos = _a.integer("Sampler.get", "pos", pos, 0, len(self),
                         f"0..{len(self)} (the epoch's length)")
        n = _a.optional_integer("Sampler.get", "n", n, 0, len(self) - pos,
                                f"0..{len(self) - pos} (what is left of the epoch from pos)")
        if n is None:
            n = len(self) - pos
        out = np.empty(n, dtype=np.uint64)
        rc = _lib.cxs_sampler_get(self._ptr, epoch, pos, n, out.ctypes.data)
        if rc:
            _raise(rc, what="sampler.get")
        return out

    def __del__(self):
        if getattr(self, "_ptr", None):
            _lib.cxs_sampler_free(self._ptr)
            self._ptr = None


from .writer import PHONEMES, RejectedUtterance, Writer  # noqa: E402 (uses _raise above)
from .importers import check, import_hdf5, import_kaldi, pack, write_vocab  # noqa: E402
__all__ += ["write_vocab"]
from .mixture import Mixture, UtteranceMixture  # noqa: E402 (uses Dataset above)

__all__ += ["Mixture", "UtteranceMixture"]
