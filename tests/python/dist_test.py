"""Training under a real torch.distributed process group: 2 processes, the
gloo backend, a small model in DistributedDataParallel, 2 epochs over
ctxshard.torch.Loader (rank and world size from torch.distributed), then the
same with FrameDataset under PyTorch's own DistributedSampler.  Checked:
equal batch counts on every rank; each epoch, the ranks' frames are
disjoint and together every frame once (frames identified by their
content, each window compared with the library's gather); a new order in
the second epoch; identical parameters on both ranks at the end.

usage: /usr/bin/python3 tests/python/dist_test.py BUILD/tools/ctxshard SOURCE_ROOT
       PYTHON tests/python/dist_test.py --installed SOURCE_ROOT"""
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import unittest

WORLD, EPOCHS, K, BATCH = 2, 2, 3, 128


def worker(rank, init, path, out, phase):
    import numpy as np
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ctxshard
    import ctxshard.torch as cxt

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=WORLD)
    ds = ctxshard.open(path)
    n = len(ds)
    rows = ds.gather(np.arange(n), 0)  # k = 0: each frame's own row identifies it
    index = {r.tobytes(): i for i, r in enumerate(rows)}
    assert len(index) == n, "test data: frames with identical features"
    centre = slice(K * ds.dim, (K + 1) * ds.dim)

    if phase == "loader":
        data = cxt.Loader(path, context=K, batch_size=BATCH, shuffle=True, seed=5, threads=1)
        assert (data.rank, data.world_size) == (dist.get_rank(), dist.get_world_size())
    else:
        fd = cxt.FrameDataset(path, K)
        sampler = torch.utils.data.distributed.DistributedSampler(fd, shuffle=True, seed=5)
        data = torch.utils.data.DataLoader(fd, batch_size=BATCH, sampler=sampler,
                                           collate_fn=cxt.collate, num_workers=1)
    torch.manual_seed(rank)  # different initial weights: DDP must broadcast rank 0's
    model = DDP(torch.nn.Sequential(torch.nn.Linear(ds.input_size(K), 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, ds.num_classes)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    result = {}
    for epoch in range(EPOCHS):
        (data if phase == "loader" else sampler).set_epoch(epoch)
        frames, batches = [], 0
        for x, y in data:
            f = np.array([index[r.tobytes()] for r in x[:, centre].numpy()], dtype=np.int64)
            wx, wy = ds.gather(f, K, labels=True)
            assert np.array_equal(x.numpy(), wx) and np.array_equal(y.numpy(), wy)
            frames.append(f)
            batches += 1
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        result[f"frames{epoch}"] = np.concatenate(frames)
        result[f"batches{epoch}"] = np.array(batches)
    result["params"] = torch.cat([p.detach().flatten() for p in model.parameters()]).numpy()
    np.savez(os.path.join(out, f"{phase}-{rank}.npz"), **result)
    dist.barrier()
    dist.destroy_process_group()


class Distributed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ctxshard-dist-")
        raw, cls.path = os.path.join(cls.tmp, "raw"), os.path.join(cls.tmp, "packed")
        subprocess.run([*EXE, "synth", raw, "--utts", "5", "--seed", "1", "--quiet"], check=True)
        subprocess.run([*EXE, "pack", raw, cls.path, "--guard", "4", "--shard-size", "300K",
                        "--quiet"], check=True)
        import ctxshard
        with ctxshard.open(cls.path) as ds:
            cls.n = len(ds)
            assert ds.num_shards > 1
        # An even number of frames: DistributedSampler's ranks then hold
        # disjoint shares with nothing repeated to even them out.
        assert cls.n % WORLD == 0, f"test data: {cls.n} frames, pick a seed with a multiple of {WORLD}"

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def train(self, phase):
        init = os.path.join(self.tmp, phase + "-init")
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(r),
                                   init, self.path, self.tmp, phase], env=CHILD_ENV)
                 for r in range(WORLD)]
        try:
            for p in procs:
                self.assertEqual(p.wait(timeout=600), 0, f"{phase}: a rank failed")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        import numpy as np
        res = [np.load(os.path.join(self.tmp, f"{phase}-{r}.npz")) for r in range(WORLD)]
        per_rank = self.n // WORLD
        orders = []
        for epoch in range(EPOCHS):
            got = [r[f"frames{epoch}"] for r in res]
            self.assertEqual([int(r[f"batches{epoch}"]) for r in res],
                             [-(-per_rank // BATCH)] * WORLD)
            self.assertEqual([len(g) for g in got], [per_rank] * WORLD)
            self.assertEqual(len(np.intersect1d(got[0], got[1])), 0)  # disjoint
            self.assertTrue(np.array_equal(np.sort(np.concatenate(got)), np.arange(self.n)))
            orders.append(np.concatenate(got))
        self.assertFalse(np.array_equal(orders[0], orders[1]), "the same order in both epochs")
        self.assertTrue(np.array_equal(res[0]["params"], res[1]["params"]))

    def test_loader(self):
        self.train("loader")

    def test_frame_dataset_distributed_sampler(self):
        self.train("framedataset")


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), *sys.argv[3:7])
        sys.exit(0)
    SRC = os.path.abspath(sys.argv[2])
    CHILD_ENV = dict(os.environ)
    if sys.argv[1] == "--installed":
        EXE = [os.path.join(sysconfig.get_path("scripts"), "ctxshard")]
    else:
        EXE = [os.path.abspath(sys.argv[1])]
        CHILD_ENV["PYTHONPATH"] = os.path.join(SRC, "python")
        CHILD_ENV.setdefault("CTXSHARD_LIB", os.path.join(
            os.path.dirname(os.path.dirname(EXE[0])), "lib", "libctxshard.so"))
        os.environ.update(CHILD_ENV)
        sys.path.insert(0, os.path.join(SRC, "python"))
    try:
        import torch  # noqa: F401
    except ImportError:
        print("torch is not installed: skipped")
        sys.exit(77)
    unittest.main(argv=sys.argv[:1], verbosity=2)
