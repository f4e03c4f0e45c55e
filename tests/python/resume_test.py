"""Resume and set_epoch: a training loop that loads a saved state and then
calls set_epoch(epoch) with the saved epoch -- the loop of the README and
the guide -- serves exactly what remains of that epoch, the batches an
uninterrupted run served, for every loader and sampler that keeps a
position: Loader (full shuffle, in order, weighted, block order, the
emulated GPU path), UtteranceLoader (host and emulated GPU),
UtteranceBatchSampler (alone and as a DataLoader's batch_sampler, with
workers), MixtureLoader and the utterance mixture loader; on several ranks
where the state is elastic (saved on 2 ranks, resumed on 3).  The rule's
other cases: set_epoch of another epoch starts it; a pass stopped mid-way
continues; after a complete pass (or one that stopped after its last
batch) set_epoch(e) serves e again and set_epoch(e + 1) the next epoch
whole.  The resume loops of README.md and docs/guide.md run as written:
interrupted after a checkpoint, run again, and what the two runs trained
on equals one uninterrupted run.

Every frame's first feature is its identity (utterance * 1000 + row), so a
batch says which frames it holds.

usage: /usr/bin/python3 tests/python/resume_test.py BUILD_DIR SOURCE_ROOT"""
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.torch as cxt  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-resume-")
VOCAB = ["sil", "aa", "b", "k", "s"]
D = 3
EPOCH = 1  # the epoch interrupted (not 0: a set_epoch that starts over is seen)


def make(name, n_utts, seed, lo=20, hi=150, dim=D):
    """A dataset with frame labels and label sequences whose frame t of
    utterance u has first feature u * 1000 + t."""
    rng = np.random.default_rng(seed)
    w = ctxshard.Writer(os.path.join(TMP, name), vocab=VOCAB, transcripts="both")
    for u in range(n_utts):
        T = int(rng.integers(lo, hi))
        x = rng.standard_normal((T, dim)).astype(np.float32)
        x[:, 0] = u * 1000 + np.arange(T)
        w.add(f"{name}-{u:05d}", x, labels=rng.integers(0, len(VOCAB), T),
              seq=rng.integers(0, len(VOCAB), int(rng.integers(1, 10))))
    w.commit()
    return os.path.join(TMP, name)


def setUpModule():
    global A, B
    A = make("a", 40, 1)
    B = make("b", 25, 2)


def tearDownModule():
    shutil.rmtree(TMP)


# ---- what a batch holds ------------------------------------------------------

def frames_of(batch):
    """The frame identities of a frame batch, (x, y) or x."""
    x = batch[0] if isinstance(batch, (tuple, list)) else batch
    k = (x.shape[1] // D - 1) // 2
    return tuple(int(v) for v in x[:, k * D].tolist())


def utterances_of(batch):
    """The utterance identities of a padded batch (x [B, T, D], ...)."""
    return tuple(int(v) // 1000 for v in batch[0][:, 0, 0].tolist())


class Mixed(tuple):
    """A mixture's batch: (items, repeat)."""


def mixed_of(batch):
    """(source, frame or utterance) of a mixture's batch, repeats marked."""
    items = batch.frames if hasattr(batch, "frames") else batch.utterances
    return Mixed((tuple(zip(batch.source.tolist(), items.tolist())), bool(batch.repeat)))


def ids_of(batch):
    """A batch of utterance numbers from a sampler: as it is."""
    return tuple(int(u) for u in batch)


def take(loader, n, ident):
    """The first n batches of the loader's next iteration; the iteration
    is then left (as a training loop interrupted by a checkpoint and a
    crash would)."""
    it = iter(loader)
    got = [ident(b) for b in itertools.islice(it, n)]
    if hasattr(it, "close"):
        it.close()
    del it
    return got


def epoch(loader, e, ident):
    loader.set_epoch(e)
    return [ident(b) for b in loader]


def flat(batches):
    """The items of a list of batches, repeats (a mixture's padding) left
    out."""
    out = []
    for b in batches:
        if isinstance(b, Mixed):
            if not b[1]:
                out += b[0]
        else:
            out += b
    return out


class Case:
    """One loader or sampler: make(rank, world_size) and ident(batch)."""

    def __init__(self, make, ident, batches=5, elastic=True):
        self.make, self.ident, self.batches, self.elastic = make, ident, batches, elastic


class Resume(unittest.TestCase):
    def check_one_rank(self, case):
        """Saved after `batches` batches of EPOCH, resumed on one rank: the
        batches before and after are the uninterrupted epoch's."""
        ref = epoch(case.make(0, 1), EPOCH, case.ident)
        self.assertGreater(len(ref), case.batches + 2)
        first = case.make(0, 1)
        first.set_epoch(EPOCH)
        before = take(first, case.batches, case.ident)
        state = first.state_dict()
        self.assertEqual(state["epoch"], EPOCH)
        again = case.make(0, 1)
        again.load_state_dict(state)
        left = len(again)
        after = []
        for e in range(state["epoch"], state["epoch"] + 1):  # the README's loop
            again.set_epoch(e)
            after += [case.ident(b) for b in again]
        self.assertEqual(len(after), len(ref) - case.batches,
                         "set_epoch after load_state_dict served another number of batches "
                         "than remained of the epoch")
        self.assertEqual(left, len(after))
        self.assertEqual(before + after, ref)
        # and the next epoch follows whole, as in an uninterrupted run
        nxt = epoch(case.make(0, 1), EPOCH + 1, case.ident)
        self.assertEqual(epoch(again, EPOCH + 1, case.ident), nxt)
        return ref

    def check_elastic(self, case, saved=2, resumed=3):
        """Saved on `saved` ranks after `batches` batches each, resumed on
        `resumed` ranks through the README's loop: each rank serves what it
        serves right after load_state_dict (the resume without set_epoch,
        which continues the global order), the count len() said, and all
        ranks of both runs together cover the uninterrupted epoch."""
        ref = flat(epoch(case.make(0, 1), EPOCH, case.ident))
        states, before = [], []
        for r in range(saved):
            loader = case.make(r, saved)
            loader.set_epoch(EPOCH)
            before += take(loader, case.batches, case.ident)
            states.append(loader.state_dict())
        self.assertEqual(len({s["global_position"] for s in states}), 1)
        state = states[0]
        self.assertEqual(state["epoch"], EPOCH)
        after = []
        for r in range(resumed):
            plain = case.make(r, resumed)
            plain.load_state_dict(state)
            expect = [case.ident(b) for b in plain]
            loader = case.make(r, resumed)
            loader.load_state_dict(state)
            left = len(loader)
            got = []
            for e in range(state["epoch"], state["epoch"] + 1):
                loader.set_epoch(e)
                got += [case.ident(b) for b in loader]
            self.assertEqual(len(got), left, f"rank {r} of {resumed}")
            self.assertEqual(got, expect, f"rank {r} of {resumed}")
            after += got
        # (a weighted epoch's padding is further draws: a superset)
        self.assertLessEqual(set(ref), set(flat(before) + flat(after)))
        # nothing of the first run's part served again, beyond the padding
        # of the last round (at most a batch of each rank but one)
        most = max(len(b[0]) if isinstance(b, Mixed) else len(b) for b in before + after)
        self.assertLessEqual(len(flat(after)),
                             len(ref) - len(flat(before)) + (resumed - 1) * most)

    def check_rule(self, case):
        """The rule's other cases, on one rank."""
        ref = epoch(case.make(0, 1), EPOCH, case.ident)
        nxt = epoch(case.make(0, 1), EPOCH + 1, case.ident)
        prev = epoch(case.make(0, 1), EPOCH - 1, case.ident)
        k = case.batches
        # a pass stopped mid-way, without a load: set_epoch(e) continues it
        loader = case.make(0, 1)
        loader.set_epoch(EPOCH)
        before = take(loader, k, case.ident)
        self.assertEqual(before + epoch(loader, EPOCH, case.ident), ref)
        # a complete pass of e: set_epoch(e) serves e again, e + 1 whole
        self.assertEqual(epoch(loader, EPOCH, case.ident), ref)
        self.assertEqual(epoch(loader, EPOCH + 1, case.ident), nxt)
        # a pass that stopped after its last batch stands at e + 1's start
        loader = case.make(0, 1)
        loader.set_epoch(EPOCH)
        take(loader, len(ref), case.ident)
        self.assertEqual(loader.state_dict()["epoch"], EPOCH + 1)
        self.assertEqual(epoch(loader, EPOCH + 1, case.ident), nxt)
        loader.set_epoch(EPOCH)
        take(loader, len(ref), case.ident)
        self.assertEqual(epoch(loader, EPOCH, case.ident), ref)
        # a loaded state of e: another epoch asked is started from its start
        first = case.make(0, 1)
        first.set_epoch(EPOCH)
        take(first, k, case.ident)
        state = first.state_dict()
        for e, want in ((EPOCH + 1, nxt), (EPOCH - 1, prev)):
            loader = case.make(0, 1)
            loader.load_state_dict(state)
            self.assertEqual(epoch(loader, e, case.ident), want)
        # set_epoch's argument is still checked
        with self.assertRaises(ValueError):
            case.make(0, 1).set_epoch(-1)

    def run_case(self, case, rule=False):
        self.check_one_rank(case)
        if case.elastic:
            self.check_elastic(case)
        if rule:
            self.check_rule(case)

    # ---- the frame Loader -----------------------------------------------------

    def frame_loader(self, **kw):
        return Case(lambda r, w: cxt.Loader(A, 1, 64, rank=r, world_size=w, prefetch=False,
                                            **kw), frames_of)

    def test_loader_shuffle(self):
        self.run_case(self.frame_loader(shuffle=True, seed=3), rule=True)

    def test_loader_sequential(self):
        self.run_case(self.frame_loader(shuffle=False))

    def test_loader_drop_last(self):
        case = self.frame_loader(shuffle=True, seed=4, drop_last=True)
        case.elastic = False  # (what is dropped depends on the ranks)
        self.run_case(case, rule=True)

    def test_loader_weighted(self):
        self.run_case(self.frame_loader(weighted=True, seed=5))

    def test_loader_block(self):
        self.run_case(self.frame_loader(shuffle="block", memory="256K", blocks=2, seed=6))

    def test_loader_gpu_emulated(self):
        """The GPU loaders' Python wrapper (the emulated device): the same
        epoch state as the host path."""
        for mode in ("stream", "resident"):
            case = self.frame_loader(shuffle=True, seed=7, gpu_emulate=True, gpu_mode=mode)
            self.run_case(case)

    # ---- whole utterances --------------------------------------------------------

    def utt_loader(self, **kw):
        return Case(lambda r, w: cxt.UtteranceLoader(A, 400, rank=r, world_size=w, **kw),
                    utterances_of, batches=3)

    def test_utterance_loader(self):
        self.run_case(self.utt_loader(seed=3, buckets=2), rule=True)

    def test_utterance_loader_block(self):
        self.run_case(self.utt_loader(seed=4, memory="256K", blocks=2))

    def test_utterance_loader_gpu_emulated(self):
        self.run_case(self.utt_loader(seed=5, gpu_emulate=True))

    def test_utterance_batch_sampler(self):
        case = Case(lambda r, w: cxt.UtteranceBatchSampler(A, 400, seed=3, rank=r, world_size=w),
                    ids_of, batches=3)
        self.run_case(case, rule=True)
        # ctxshard.utterances.UtteranceSampler is the same object without torch
        from ctxshard.utterances import UtteranceSampler
        self.run_case(Case(lambda r, w: UtteranceSampler(A, 400, seed=3, rank=r, world_size=w),
                           ids_of, batches=3))

    def test_utterance_batch_sampler_dataloader(self):
        """As a DataLoader's batch_sampler, with workers fetching ahead: the
        state saved with the batches the loop took (position=), loaded into
        a new sampler, and the README's loop over a new DataLoader."""
        ds = cxt.UtteranceDataset(A)

        def loader(sampler):
            return torch.utils.data.DataLoader(ds, batch_sampler=sampler, num_workers=2,
                                               collate_fn=cxt.pad_collate)

        for w in (1, 2):
            for r in range(w):
                def sampler():
                    return cxt.UtteranceBatchSampler(A, 400, seed=8, rank=r, world_size=w)
                ref_sampler = sampler()
                ref = epoch_dl(ref_sampler, loader(ref_sampler), EPOCH)
                first = sampler()
                first.set_epoch(EPOCH)
                before = take(loader(first), 3, utterances_of)
                state = first.state_dict(position=3)
                again = sampler()
                again.load_state_dict(state)
                left = len(again)
                after = []
                dl = loader(again)
                for e in range(state["epoch"], state["epoch"] + 1):
                    again.set_epoch(e)
                    after += [utterances_of(b) for b in dl]
                self.assertEqual(len(after), left)
                self.assertEqual(before + after, ref, f"rank {r} of {w}")

    # ---- mixtures ----------------------------------------------------------------

    def test_mixture_loader(self):
        case = Case(lambda r, w: cxt.Loader([A, B], 1, 64, seed=3, rank=r, world_size=w,
                                            weights=[0.6, 0.4]), mixed_of)
        self.run_case(case, rule=True)

    def test_mixture_loader_block(self):
        case = Case(lambda r, w: cxt.Loader([A, B], 1, 64, seed=4, rank=r, world_size=w,
                                            shuffle="block", memory="512K"), mixed_of)
        self.run_case(case)

    def test_utterance_mixture_loader(self):
        case = Case(lambda r, w: cxt.UtteranceLoader([A, B], 400, seed=3, rank=r,
                                                     world_size=w), mixed_of, batches=3)
        self.run_case(case, rule=True)


def epoch_dl(sampler, dl, e):
    sampler.set_epoch(e)
    return [utterances_of(b) for b in dl]


# ---- the loops of the README and the guide, as written -------------------------

PRELUDE = '''
import os, sys, json
import numpy as np
import torch
import ctxshard, ctxshard.torch
epochs = 2
D = {D}
LOG, CRASH = {log!r}, {crash!r}
def make_model(input_size):
    return torch.nn.Linear(input_size, 5)
model = None
seen = []
def train_step(*batch):
    x = batch[0]
    if x.dim() == 2:
        k = (x.shape[1] // D - 1) // 2
        ids = x[:, k * D]
    else:
        ids = x[:, 0, 0]
    seen.append(1)
    if CRASH and len(seen) == CRASH:
        os._exit(3)  # the machine goes down: nothing after the last checkpoint is kept
    with open(LOG, "a") as f:
        f.write(json.dumps([int(v) for v in ids.tolist()]) + "\\n")
'''


def resume_loops():
    """(where, text) of every Python block of the README and the guide that
    resumes a loader from a checkpoint inside its training loop."""
    out = []
    for doc in ("README.md", os.path.join("docs", "guide.md")):
        lines = open(os.path.join(SRC, doc)).read().split("\n")
        n = 0
        while n < len(lines):
            if lines[n].strip() == "```python":
                end = n + 1
                while not lines[end].startswith("```"):
                    end += 1
                text = "\n".join(lines[n + 1:end])
                if "load_state_dict" in text and ".set_epoch(" in text and "for epoch" in text:
                    out.append((f"{doc}:{n + 1}", text))
                n = end
            n += 1
    return out


class DocsLoops(unittest.TestCase):
    def test_resume_loops_as_written(self):
        """Each loop runs in a directory holding the dataset the docs name
        (150,000 frames: more than 100 batches of 1024, so a checkpoint is
        written mid-epoch); the first run dies at its 130th batch, after
        the checkpoint of its 100th; the second resumes.  The batches the
        model was trained on up to the checkpoint plus those of the second
        run equal an uninterrupted run's."""
        loops = resume_loops()
        where = [w for w, _ in loops]
        self.assertTrue(any(w.startswith("README.md") for w in where), where)
        self.assertTrue(any(w.startswith("docs/guide.md") for w in where), where)
        big = make("docs", 1000, 9, lo=100, hi=200, dim=D)
        for w, text in loops:
            with self.subTest(where=w):
                ref = self.run_loop(big, text, crash=0)
                part = self.run_loop(big, text, crash=130, keep=True)
                self.assertEqual(len(part["log"]), 129)  # (the 130th never returned)
                rest = self.run_loop(big, text, crash=0, cwd=part["cwd"])
                self.assertGreater(len(ref["log"]), 130)
                got = part["log"][:100] + rest["log"]
                diff = next((i for i, (a, b) in enumerate(zip(got, ref["log"])) if a != b),
                            None)
                self.assertTrue(diff is None and len(got) == len(ref["log"]),
                                f"{w}: the two runs trained on {len(got)} batches, an "
                                f"uninterrupted run on {len(ref['log'])}; the first that "
                                f"differs is batch {diff} (the checkpoint stood at 100)")

    def run_loop(self, data, text, crash, keep=False, cwd=None):
        if cwd is None:
            cwd = tempfile.mkdtemp(dir=TMP)
            os.makedirs(os.path.join(cwd, "data"))
            for name in ("train.cxs", os.path.join("data", "train.cxs")):
                os.symlink(data, os.path.join(cwd, name))
        log = os.path.join(cwd, "log.jsonl")
        if os.path.exists(log):
            os.unlink(log)
        code = PRELUDE.format(D=D, log=log, crash=crash) + \
            text.replace("/data/", os.path.join(cwd, "data") + "/")
        env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"),
                   CTXSHARD_MEMORY_AVAILABLE=str(1 << 30))
        p = subprocess.run(["/usr/bin/python3", "-W", "ignore", "-c", code], cwd=cwd, env=env,
                           capture_output=True, text=True, timeout=600)
        if crash:
            self.assertEqual(p.returncode, 3, p.stderr[-3000:])
        else:
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        with open(log) as f:
            got = [tuple(json.loads(line)) for line in f]
        return {"log": got, "cwd": cwd}


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
