"""Ownership and ordering of what the loaders hand out, on the emulated GPU
device (late schedule: the device runs work only when something waits for
it) and with a stand-in for a CUDA stream that runs copies late:

- a pinned batch buffer goes back to the workers only after the copy that
  reads it has run (the copying fallback of device='cuda', and the user's
  own x.to(dev, non_blocking=True) with pin_memory=True);
- a Loader dropped is freed at once, with the dataset it holds;
- a device batch outlives its loader object, and close() with batches
  outstanding leaves them valid; the memory goes with the last of them;
- a device batch stays valid while anything refers to it (a list, an
  autograd graph over several micro-batches), in every mode and for
  utterance batches: never refilled under the caller;
- the raw GpuLoader's batches read after emulated_sync();
- the default budgets: pool mode's follows the device's total memory and
  the dataset (a resume made while other memory is taken lays the pool
  out alike), and the utterance loader says once which it took and why;
- on a CUDA device only: the copying fallback's fences are on the stream
  each batch was taken on (a consumer switching streams);
- the emulated device never faulted.

usage: /usr/bin/python3 tests/python/ownership_test.py BUILD_DIR SOURCE_ROOT"""
import ctypes
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings
import weakref

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.gpu as g  # noqa: E402
import ctxshard.torch as cxt  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-own-")
PATH = os.path.join(TMP, "f32")
SEQ = os.path.join(TMP, "both")


def setUpModule():
    raw = os.path.join(TMP, "raw")
    subprocess.run([EXE, "synth", raw, "--utts", "30", "--seed", "3", "--dim", "12", "--quiet"],
                   check=True)
    subprocess.run([EXE, "pack", raw, PATH, "--shard-size", "400K", "--quiet"], check=True)
    subprocess.run([EXE, "pack", raw, SEQ, "--transcripts", "both", "--quiet"], check=True)


def tearDownModule():
    shutil.rmtree(TMP)


class LateStream:
    """A stand-in for a CUDA stream that runs `lag` copies behind the host.
    copy() queues a read of a tensor's bytes by address, as a DMA engine
    reads them: the queue holds no reference to the tensor, so nothing but
    the loader's own ordering keeps the buffer unchanged until the copy
    runs.  record() is the fence: an event that completes when every copy
    queued before it has run."""

    def __init__(self, lag):
        self.lag, self.queue, self.done, self.results = lag, [], 0, []

    def copy(self, t):
        self.queue.append((t.data_ptr(), t.numel() * t.element_size(), t.numpy().dtype,
                           tuple(t.shape)))
        while self.done < len(self.queue) - self.lag:
            self._run()
        return len(self.queue) - 1

    def _run(self):
        ptr, n, dtype, shape = self.queue[self.done]
        self.results.append(np.frombuffer(ctypes.string_at(ptr, n), dtype).reshape(shape).copy())
        self.done += 1

    def flush(self):
        while self.done < len(self.queue):
            self._run()

    def record(self):
        stream, ticket = self, len(self.queue)

        class Event:
            def query(self):
                return stream.done >= ticket

            def synchronize(self):
                while stream.done < ticket:
                    stream._run()
        return Event()


class PinnedBuffersWaitForTheirCopies(unittest.TestCase):
    def test_late_copies_read_their_own_batch(self):
        # The loader's copying fallback and a user's own non_blocking copy
        # drop the last reference to the pinned batch right after queueing
        # the copy; the stream may run it batches later.
        for lag in (0, 1, 2, 4, 9):
            L = cxt.Loader(PATH, 3, 64, seed=2, threads=2)
            late = LateStream(lag)
            L._buffers.fence = late.record  # what a CUDA stream's record_event() is
            want, idx = [], []
            for x, y in L:
                want.append((x.numpy().copy(), y.numpy().copy()))
                idx.append((late.copy(x), late.copy(y)))
                del x, y  # as `x = x.to(dev, non_blocking=True)` drops it
            late.flush()
            bad = sum(not (np.array_equal(late.results[i], wx) and
                           np.array_equal(late.results[j], wy))
                      for (i, j), (wx, wy) in zip(idx, want))
            self.assertEqual(bad, 0, f"lag {lag}: {bad} of {len(want)} batches were "
                             "refilled before their copy ran")
            self.assertGreater(len(want), 20)
            # pinned memory stays bounded: a few buffers in flight, not one a batch
            self.assertLessEqual(len(L._buffers.pool), L.threads + 2 + 6)

    def test_a_dropped_loader_is_freed_at_once(self):
        # Its buffers refer to no loader: the Loader (and the dataset it
        # holds open, which a streamed URL's other readers wait for) goes
        # with its last reference, not at a later garbage collection.
        gc.disable()
        try:
            L = cxt.Loader(PATH, 3, 64, seed=2, threads=2)
            for n, _ in enumerate(L):
                if n == 2:
                    break
            gone = weakref.ref(L)
            del L, _
            self.assertIsNone(gone(), "the Loader outlived its last reference (a cycle)")
        finally:
            gc.enable()


class CopyingFallbackOnTwoStreams(unittest.TestCase):
    """The copying fallback of device='cuda' (the C GPU loader not used):
    a pinned pair's fence is recorded on the stream its copies went to (the
    one current when the batch was taken), so that a consumer switching
    streams between batches, one of them running far behind, gets every
    batch exact.  A fence recorded on the stream current when the pair is
    found unreferenced (the other, idle one) lets the workers refill the
    pair before the late copy reads it."""

    @unittest.skipUnless(torch.cuda.is_available(),
                         "needs a CUDA device: the fallback's copies are torch's non_blocking "
                         ".to() on CUDA streams, which the emulated device does not model")
    def test_switching_streams_between_batches(self):
        want = [(x.clone(), y.clone()) for x, y in cxt.Loader(PATH, 3, 64, seed=2, threads=2)]
        real = cxt._gpu.probe
        cxt._gpu.probe = lambda device=0: {"usable": False,
                                           "reason": "the copying fallback, for this test"}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                L = cxt.Loader(PATH, 3, 64, seed=2, threads=2, device="cuda")
        finally:
            cxt._gpu.probe = real
        self.assertEqual(L.gpu_mode, "host")
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        got, it = [], iter(L)
        for i in range(len(want)):
            with torch.cuda.stream(streams[i % 2]):
                if i % 2 == 0:
                    torch.cuda._sleep(20_000_000)  # this stream's copies run late
                x, y = next(it)
                got.append((x, y))
        torch.cuda.synchronize()
        bad = [i for i, ((x, y), (wx, wy)) in enumerate(zip(got, want))
               if not (torch.equal(x.cpu(), wx) and torch.equal(y.cpu(), wy))]
        self.assertEqual(bad, [], f"batches {bad} of {len(want)} were refilled before their "
                         "copy ran")
        self.assertGreater(len(want), 20)


class MixtureCopiesItsBatches(unittest.TestCase):
    def test_mixture_batches_sent_to_a_device(self):
        # Each mixture batch is a fresh (pinned) tensor, copied as it is:
        # no pair of the loader's to fence (it raised AttributeError at
        # the first batch, on any device).
        want = list(cxt.Loader([PATH, SEQ], 1, 32, seed=4))
        got = list(cxt.Loader([PATH, SEQ], 1, 32, seed=4, device="cpu:0"))
        self.assertEqual(len(got), len(want))
        for g_, w in zip(got, want):
            self.assertTrue(all(torch.equal(a, b) for a, b in zip(g_, w)))
            self.assertTrue(torch.equal(g_.source, w.source))


class DeviceBatchOwnership(unittest.TestCase):
    def tearDown(self):
        gc.collect()
        self.assertIsNone(g.emulated_fault())

    def reference(self, **kw):
        return next(iter(cxt.Loader(PATH, 4, 100, seed=5, **kw)))

    def test_schedule_is_late(self):
        self.assertEqual(_schedule(), "late")

    def test_a_batch_outlives_its_loader(self):
        rx, ry = self.reference()
        for mode in ("stream", "resident", "pool"):
            info = ctxshard.open(PATH).info
            budget = (4 * 2 * info["max_length"] * info["dim"] * 4 +
                      3 * 100 * (9 * info["dim"] * 4 + 8 + 24)) if mode == "pool" else None
            x, y = next(iter(cxt.Loader(PATH, 4, 100, seed=5, gpu_emulate=True, gpu_mode=mode,
                                        gpu_budget=budget)))
            gc.collect()  # the Loader and its GpuLoader are gone; x and y hold the memory
            if mode != "pool":
                self.assertTrue(torch.equal(x, rx), mode)
                self.assertTrue(torch.equal(y, ry), mode)
            else:  # the pool serves its own order: its rows are real windows
                self.assertFalse(torch.isnan(x).any())
                self.assertTrue(bool((y >= 0).all()))
            del x, y
        utt = next(iter(cxt.UtteranceLoader(SEQ, 5000, seed=1, gpu_emulate=True, targets=True)))
        ref = next(iter(cxt.UtteranceLoader(SEQ, 5000, seed=1, targets=True)))
        gc.collect()
        for a, b in zip(utt, ref):
            self.assertTrue(torch.equal(a, b))

    def test_close_with_batches_outstanding(self):
        rx, ry = self.reference()
        L = cxt.Loader(PATH, 4, 100, seed=5, gpu_emulate=True, gpu_mode="resident")
        x, y = next(iter(L))
        owner = weakref.ref(L._gl.owner)
        L.close()
        gc.collect()
        self.assertTrue(torch.equal(x, rx) and torch.equal(y, ry))  # still valid
        self.assertIsNotNone(owner())
        del x
        gc.collect()
        self.assertIsNotNone(owner())  # y still holds it
        del y
        gc.collect()
        self.assertIsNone(owner())  # the last batch gone: the memory went with it
        U = cxt.UtteranceLoader(SEQ, 5000, seed=1, gpu_emulate=True)
        ref = next(iter(cxt.UtteranceLoader(SEQ, 5000, seed=1)))
        got = next(iter(U))
        owner = weakref.ref(U._gl)
        U.close()
        gc.collect()
        for a, b in zip(got, ref):
            self.assertTrue(torch.equal(a, b))
        del got
        gc.collect()
        self.assertIsNone(owner())

    def test_raw_loader_reads_after_sync(self):
        ds = ctxshard.open(PATH)
        s = ctxshard.Sampler(ds, ctxshard.SHUFFLE, seed=8)
        W = ds.input_size(2)
        with g.GpuLoader(ds, s, 2, 50, device=g.EMULATE, mode="resident") as L:
            for _ in range(5):
                b = L.next()
                g.emulated_sync()
                x = np.ctypeslib.as_array(ctypes.cast(b.x, ctypes.POINTER(ctypes.c_float)),
                                          shape=(b.n, W)).copy()
                self.assertTrue(np.array_equal(x, ds.gather(b.frames, 2)))


def _pool_budget(batch, k):
    info = ctxshard.open(PATH).info
    return 4 * 2 * info["max_length"] * info["dim"] * 4 + \
        3 * batch * ((2 * k + 1) * info["dim"] * 4 + 8 + 24)


def _frame_loader(mode, **kw):
    budget = _pool_budget(16, 1) if mode == "pool" else None
    return cxt.Loader(PATH, 1, 16, seed=5, gpu_emulate=True, gpu_mode=mode, gpu_budget=budget,
                      **kw)


class DeviceBatchesWhileHeld(unittest.TestCase):
    """What the caller holds is never rewritten: the batches of a gradient
    accumulation (the graph holds them until backward) and batches kept in
    a list equal the same batches cloned when taken."""

    def tearDown(self):
        gc.collect()
        self.assertIsNone(g.emulated_fault())

    @staticmethod
    def _accumulate(batches, width, take):
        torch.manual_seed(0)
        model = torch.nn.Linear(width, 3)
        it = iter(batches)
        loss = 0
        for _ in range(4):  # gradient accumulation: 4 micro-batches, one backward
            x = take(next(it))
            loss = loss + (model(x) ** 2).sum()
        loss.backward()
        return model.weight.grad.clone(), model.bias.grad.clone()

    def _check_grads(self, make, width, first, what):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = self._accumulate(make(), width, first)
            want = self._accumulate(make(), width, lambda b: first(b).clone())
        for a, b in zip(got, want):
            self.assertTrue(torch.equal(a, b), f"{what}: gradients differ by "
                            f"{(a - b).abs().max().item()} from the cloned batches'")

    def _check_kept(self, make, what):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kept, clones = [], []
            for b in make():
                kept.append(b)
                clones.append(tuple(t.clone() for t in b))
                if len(kept) == 8:
                    break
        self.assertEqual(len(kept), 8)
        bad = [i for i, (b, c) in enumerate(zip(kept, clones))
               if not all(torch.equal(t, u) for t, u in zip(b, c))]
        self.assertEqual(bad, [], f"{what}: batches {bad} of 8 kept no longer hold their data")

    def test_gradient_accumulation(self):
        width = ctxshard.open(PATH).input_size(1)
        for mode in ("stream", "resident", "pool"):
            self._check_grads(lambda: _frame_loader(mode), width, lambda b: b[0], mode)
        self._check_grads(lambda: cxt.UtteranceLoader(SEQ, 3000, seed=1, gpu_emulate=True),
                          ctxshard.open(SEQ).dim, lambda b: b[0], "utterances")

    def test_batches_kept_in_a_list(self):
        for mode in ("stream", "resident", "pool"):
            self._check_kept(lambda: _frame_loader(mode), mode)
        self._check_kept(lambda: cxt.UtteranceLoader(SEQ, 3000, seed=1, gpu_emulate=True,
                                                     targets=True), "utterances")

    def test_common_loop_keeps_three_buffers(self):
        # take, train, drop: the ring never grows, no copy is made
        for mode in ("stream", "resident", "pool"):
            L = _frame_loader(mode)
            n = 0
            for x, y in L:
                n += 1
                (x.sum() + y.sum()).item()
            held = L._gl.info()["device_bytes"]
            self.assertGreater(n, 20)
            M = _frame_loader(mode)
            x, y = next(iter(M))
            del x, y
            self.assertEqual(held, M._gl.info()["device_bytes"], mode)

    def test_holding_more_says_so_once(self):
        L = _frame_loader("resident")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            kept = [b for _, b in zip(range(6), L)]
        said = [str(x.message) for x in w if "held at once" in str(x.message)]
        self.assertEqual(len(said), 1, said)
        self.assertIn("gpu_budget", said[0])
        del kept


class EmulatedDeviceMemory(unittest.TestCase):
    """The emulated device with a memory size (CXS_GPU_EMU_MEMORY): the
    default budget is half of it, auto takes the mode that fits, and an
    allocation beyond the device fails as cudaMalloc does."""

    def run_with(self, memory, code):
        env = dict(os.environ, CXS_GPU_EMU_MEMORY=str(memory))
        out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], env=env,
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.strip()

    def test_default_budget_is_half_the_device(self):
        code = f"""
import sys; sys.path.insert(0, {os.path.join(SRC, 'python')!r})
import ctxshard.torch as cxt
L = cxt.Loader({PATH!r}, 1, 16, seed=5, gpu_emulate=True)
x, y = next(iter(L))
print(L.gpu_info["mode"], "|", L.gpu_info["reason"])
"""
        feat = ctxshard.open(PATH).info["feature_bytes"]
        big = self.run_with(8 * feat, code)  # half of it holds the features: resident
        self.assertTrue(big.startswith("resident |"), big)
        self.assertIn(f"budget of {4 * feat} (the default: half the device's total of "
                      f"{8 * feat} bytes)", big)
        small = self.run_with(feat, code)  # half of it does not: stream
        self.assertTrue(small.startswith("stream |"), small)
        self.assertIn(f"budget of {feat // 2} (the default", small)

    def test_pool_default_budget_follows_the_device_not_the_free(self):
        """Pool mode's default budget is a function of the device's total
        memory and the dataset: a second pool made while the first holds
        its memory is laid out alike, and a resume made then is accepted
        and serves the rest of the epoch exactly (was: 80% of the free,
        another layout, the resume refused)."""
        code = f"""
import sys, warnings; sys.path.insert(0, {os.path.join(SRC, 'python')!r})
import numpy as np, ctxshard, ctxshard.torch as cxt
def pool():
    return cxt.Loader({PATH!r}, 0, 16, seed=5, gpu_emulate=True, gpu_mode="pool", labels=False)
ds = ctxshard.open({PATH!r})
idx = {{r.tobytes(): i for i, r in enumerate(ds.gather(np.arange(len(ds)), 0))}}
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    A = pool()
    it = iter(A)
    first = [idx[r.tobytes()] for _ in range(5) for r in next(it).numpy()]
    state = A.state_dict()
    B = pool()  # made while A holds its pool
    B.load_state_dict(state)
    rest = [idx[r.tobytes()] for x in B for r in x.numpy()]
said = [str(x.message) for x in w if "pool mode;" in str(x.message)]
print(sorted(first + rest) == list(range(len(ds))), len(said))
print(A.gpu_info["reason"])
print(B.gpu_info["reason"])
"""
        info = ctxshard.open(PATH).info
        memory = 8 * info["feature_bytes"]
        exact_said, a, b = self.run_with(memory, code).split("\n")
        self.assertEqual(a, b)
        self.assertEqual(exact_said, "True 2", a)  # every frame once; said by each loader
        rows = -(-info["num_frames"] // 3)  # 3 segments of 4 hold every frame
        self.assertTrue(a.startswith(f"pool: 4 segments of {max(rows, info['max_length'])} "
                                     "rows; budget "), a)
        self.assertIn(f"less than half the device's total of {memory} bytes", a)

    def test_utterance_loader_says_its_default_budget_once(self):
        code = f"""
import sys, warnings; sys.path.insert(0, {os.path.join(SRC, 'python')!r})
import ctxshard.torch as cxt
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    U = cxt.UtteranceLoader({SEQ!r}, 3000, seed=1, gpu_emulate=True)
    for _ in range(2):
        n = sum(1 for _ in U)
    G = cxt.UtteranceLoader({SEQ!r}, 3000, seed=1, gpu_emulate=True, gpu_budget=1 << 30)
    n += sum(1 for _ in G)
said = [str(x.message) for x in w if "budget" in str(x.message)]
print(len(said), n > 0)
print(said[0] if said else "")
print(U.gpu_info["reason"])
"""
        memory = 64 * ctxshard.open(SEQ).info["feature_bytes"]
        count, warned, reason = self.run_with(memory, code).split("\n")
        self.assertEqual(count, "1 True")  # once, and only for the default
        self.assertIn("UtteranceLoader(gpu_emulate=True): resident mode; utterances: resident "
                      "data ", warned)
        self.assertIn(f"(the default: half the device's total of {memory} bytes)", warned)
        self.assertIn("(gpu_budget= sets it)", warned)
        self.assertIn(reason, warned)

    def test_allocation_beyond_the_device_fails(self):
        code = f"""
import sys; sys.path.insert(0, {os.path.join(SRC, 'python')!r})
import ctxshard.torch as cxt
L = cxt.Loader({PATH!r}, 1, 16, seed=5, gpu_emulate=True, gpu_mode="resident",
               gpu_budget=1 << 30)
try:
    next(iter(L))
except Exception as e:
    print(type(e).__name__, e)
"""
        out = self.run_with(ctxshard.open(PATH).info["feature_bytes"] // 2, code)
        self.assertIn("out of (emulated device) memory", out)


def _schedule():
    return ctxshard._native.lib.cxs_gpu_emu_schedule().decode()


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
