"""The Python loaders' positions are the C loaders' (cxs_*_position), and
states as the previous version wrote them still load: a state_dict given
as a dict literal in the keys and layout that version saved, for the
frame Loader (also the layout from before global positions), the
UtteranceLoader and both mixtures, resumes into exactly the batches an
uninterrupted pass served after that point.  A pass stopped right after
the last batch that drop_last keeps stands at the next epoch (the C
loader's decision).  A mixture loader with an explicit CPU device
('cpu:0') serves its batches (it used to fail on a fence it never had).  The
GPU loaders on the emulated device report after every batch the states
of their CPU twins (cxs_gpu_*_position), and pool mode resumes from its
own.

Every frame's first feature is its identity (utterance * 1000 + row), as
in resume_test.py, whose maker this test uses.

usage: /usr/bin/python3 tests/python/positions_test.py BUILD_DIR SOURCE_ROOT"""
import os
import shutil
import sys
import unittest

# the datasets of the resume test (every frame's first feature its
# identity), made the same way; it also points sys.path and CTXSHARD_LIB
# at the build given
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import resume_test as rt  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.torch as cxt  # noqa: E402

A, B = rt.make("A", 40, 1), rt.make("B", 25, 2)


def ids(batch):
    """What a batch holds: the identities of its frames (first features)."""
    x = batch[0] if isinstance(batch, tuple) else batch
    return x[..., 0].flatten().tolist()


def epoch_of(loader, epoch):
    loader.set_epoch(epoch)
    return [ids(b) for b in loader]


class Positions(unittest.TestCase):
    def resumes(self, make_loader, state, k):
        """make_loader() loaded with `state` (saved after k batches of epoch
        1) serves what an uninterrupted pass of epoch 1 served after k."""
        ref = epoch_of(make_loader(), 1)
        self.assertGreater(len(ref), k + 2)  # a resume inside the epoch
        L = make_loader()
        L.load_state_dict(state)
        L.set_epoch(1)
        self.assertEqual([ids(b) for b in L], ref[k:])

    def test_frame_loader_states_of_the_previous_version(self):
        frames = ctxshard.open(A).num_frames
        mk = lambda: cxt.Loader(A, 0, 64, seed=3, labels=True)  # noqa: E731
        self.resumes(mk, {"seed": 3, "epoch": 1, "global_position": 5 * 64,
                          "sampler": "shuffle", "epoch_samples": frames, "position": 5 * 64,
                          "rank": 0, "world_size": 1, "batch_size": 64, "context": 0}, 5)
        # before global positions: position, world_size and samples_per_epoch
        self.resumes(mk, {"seed": 3, "epoch": 1, "position": 7 * 64, "world_size": 1,
                          "samples_per_epoch": frames, "batch_size": 64, "context": 0}, 7)

    def test_utterance_loader_state_of_the_previous_version(self):
        mk = lambda: cxt.UtteranceLoader(A, 300, seed=4)  # noqa: E731
        total = mk().sampler.global_batches(1)
        self.resumes(mk, {"seed": 4, "epoch": 1, "global_position": 3, "sampler": "utterance",
                          "frame_budget": 300, "shuffle": True, "buckets": None,
                          "max_batch": 0, "long_utterances": "refuse", "memory": None,
                          "blocks": None, "global_batches": total, "position": 3,
                          "rank": 0, "world_size": 1}, 3)

    def test_mixture_states_of_the_previous_version(self):
        dsa, dsb = ctxshard.open(A), ctxshard.open(B)
        mk = lambda: cxt.MixtureLoader([A, B], 0, 50, seed=5)  # noqa: E731
        m = mk()
        self.resumes(mk, {"kind": "mixture", "seed": 5, "epoch": 1, "global_position": 4,
                          "unit": "batches", "batch_size": 50, "sources": [A, B],
                          "identities": [dsa.identity, dsb.identity],
                          "shares": list(m.shares), "quotas": list(m.quotas),
                          "epoch_size": m.sampler.epoch_size, "shuffle": True,
                          "drop_last": False, "memory": None, "blocks": None,
                          "normalization": "none"}, 4)
        mku = lambda: cxt.UtteranceLoader([A, B], 300, seed=6)  # noqa: E731
        u = mku()
        self.resumes(mku, {"kind": "utterance-mixture", "seed": 6, "epoch": 1,
                           "global_position": 2, "unit": "batches",
                           "global_batches": u.global_batches(1), "sources": [A, B],
                           "identities": [dsa.identity, dsb.identity],
                           "shares": list(u.shares), "quotas": list(u.quotas),
                           "epoch_size": u.sampler.epoch_size, "frame_budget": 300,
                           "buckets": u.sampler.buckets, "max_batch": 0,
                           "long_utterances": "refuse", "stratify": u.sampler.stratify,
                           "shuffle": True, "memory": None, "blocks": None,
                           "drop_last": False, "normalization": "none",
                           "per_utterance": False}, 2)

    def test_a_pass_stopped_after_the_last_kept_batch_stands_at_the_next_epoch(self):
        L = cxt.Loader(A, 0, 64, seed=3, drop_last=True)
        L.set_epoch(1)
        n = len(L)
        for i, _ in enumerate(L):
            if i == n - 1:
                break  # the tail drop_last cuts is all that is left
        st = L.state_dict()
        self.assertEqual((st["epoch"], st["global_position"]), (2, 0))
        L.set_epoch(2)
        self.assertEqual(len(L), n)
        stopped = cxt.Loader(A, 0, 64, seed=3)
        stopped.set_epoch(1)
        for i, _ in enumerate(stopped):
            if i == 2:
                break
        self.assertEqual(stopped.state_dict()["global_position"], 3 * 64)

    def test_mixture_loader_on_an_explicit_cpu_device(self):
        ref = [ids(b) for b in cxt.MixtureLoader([A, B], 0, 50, seed=5)]
        got = [ids(b) for b in cxt.MixtureLoader([A, B], 0, 50, seed=5, device="cpu:0")]
        self.assertEqual(got, ref)

    def states_follow(self, make, **device):
        """After every batch (and after the pass) a device loader on the
        emulated GPU reports the state its CPU twin reports after the same
        batch: both are the C loaders' positions (cxs_gpu_*_position and
        cxs_*_position), which continue each other."""
        cpu, gpu = make(), make(**device)
        for L in (cpu, gpu):
            L.set_epoch(1)
        states = [[], []]
        for k, L in enumerate((cpu, gpu)):
            for b in L:
                states[k].append((ids(b), L.state_dict()))
            states[k].append(((), L.state_dict()))
        self.assertGreater(len(states[0]), 3)
        self.assertEqual(states[1], states[0])
        return states[0]

    def test_gpu_loaders_report_the_cpu_loaders_states(self):
        for mode in ("stream", "resident"):
            for drop in (False, True):
                got = self.states_follow(lambda **kw: cxt.Loader(A, 0, 64, seed=3,
                                                                  drop_last=drop, **kw),
                                         gpu_emulate=True, gpu_mode=mode)
                # the last batch kept: the next epoch's start, before the pass ends
                self.assertEqual((got[-2][1]["epoch"], got[-2][1]["global_position"]), (2, 0))
        got = self.states_follow(lambda **kw: cxt.UtteranceLoader(A, 300, seed=4, **kw),
                                 gpu_emulate=True)
        self.assertEqual((got[-2][1]["epoch"], got[-2][1]["global_position"]), (2, 0))

    def test_gpu_pool_resumes_from_its_state(self):
        mk = lambda: cxt.Loader(A, 0, 64, seed=3, gpu_emulate=True, gpu_mode="pool",  # noqa: E731
                                gpu_budget=1 << 20)
        ref = epoch_of(mk(), 1)
        L = mk()
        L.set_epoch(1)
        for i, _ in enumerate(L):
            if i == 4:
                break
        st = L.state_dict()
        self.assertEqual((st["epoch"], st["global_position"]), (1, 5 * 64))
        R = mk()
        R.load_state_dict(st)
        R.set_epoch(1)
        self.assertEqual([ids(b) for b in R], ref[5:])


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        shutil.rmtree(rt.TMP)
