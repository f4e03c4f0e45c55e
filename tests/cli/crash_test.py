"""Crash safety of `ctxshard pack` and `ctxshard merge`: killed with SIGKILL
at every phase (and at random moments), and out of disk space (injected,
and on a real small tmpfs when mounting is allowed): OUT holds either
nothing or the previous complete dataset, never something partial; nothing
half-written opens; a rerun succeeds.

The cases that stop the writer at exact points need the test hooks
(CXS_PACK_FAULT, in builds configured with -Dtest_hooks=true; meson sets
CXS_TEST_HOOKS=1 for them): without them they are skipped, with a
message, and the build is checked to ignore CXS_PACK_FAULT instead, as
what users install must.

usage: /usr/bin/python3 tests/cli/crash_test.py BUILD/tools/ctxshard"""
import filecmp
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

EXE = os.path.abspath(sys.argv[1])
HOOKS = os.environ.get("CXS_TEST_HOOKS") == "1"
needs_hooks = unittest.skipUnless(
    HOOKS, "built without the test hooks (-Dtest_hooks=true): CXS_PACK_FAULT does nothing here")


def run(*args, env=None):
    e = dict(os.environ)
    e.pop("CXS_PACK_FAULT", None)
    e.update(env or {})
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, env=e)


def wait_for_shard(d, timeout=30):
    """Wait until a pack writing into d has started its first shard."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for n in os.listdir(d):
            if n.startswith(".out.tmp-") and os.listdir(os.path.join(d, n)):
                time.sleep(0.3)  # it reaches the stall right after
                return n
        time.sleep(0.02)
    raise AssertionError("the pack did not start")


def same_tree(a, b):
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(
        filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


class Crash(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ctxshard-crash-")
        cls.raw = os.path.join(cls.tmp, "raw")
        assert run("synth", cls.raw, "--utts", 24, "--seed", 5, "--quiet").returncode == 0
        # Reference results: a clean pack (the new dataset) and a different
        # one (the previous dataset that a pack replaces).
        cls.new = os.path.join(cls.tmp, "ref-new")
        cls.old = os.path.join(cls.tmp, "ref-old")
        assert run("pack", cls.raw, cls.new, *cls.opts(), "--quiet").returncode == 0
        assert run("pack", cls.raw, cls.old, "--dtype", "f16", "--quiet").returncode == 0
        assert len(os.listdir(cls.new)) >= 4  # several shards

    @staticmethod
    def opts():
        return ["--shard-size", "400K", "--threads", "2"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def work(self, previous):
        d = tempfile.mkdtemp(dir=self.tmp)
        out = os.path.join(d, "out")
        if previous:
            shutil.copytree(self.old, out)
        return d, out

    def check_state(self, d, out, previous, allow_new=True):
        """OUT is the previous dataset, or (once renamed) the new one, or
        absent; anything else in d is a temporary directory that does not
        open as a dataset unless it is complete."""
        if os.path.exists(out):
            if previous and same_tree(out, self.old):
                state = "old"
            else:
                self.assertTrue(allow_new and same_tree(out, self.new), "OUT holds a mix")
                state = "new"
            self.assertEqual(run("verify", out).returncode, 0)
        else:
            self.assertFalse(previous, "the previous dataset vanished")
            state = "none"
        for name in os.listdir(d):
            if name == "out":
                continue
            self.assertTrue(name.startswith(".out.tmp-"), name)
            tmpdir = os.path.join(d, name)
            r = run("info", tmpdir)
            if r.returncode == 0:  # it opens: then it must be complete and intact
                self.assertEqual(run("verify", tmpdir).returncode, 0)
        return state

    def rerun(self, d, out):
        r = run("pack", self.raw, out, *self.opts(), "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(same_tree(out, self.new))
        # what the killed pack left behind is gone
        self.assertEqual(os.listdir(d), ["out"])

    @needs_hooks
    def test_kill_at_every_phase(self):
        phases = [("shard-begin", 0), ("shard-begin", 2), ("utt", 0), ("utt", 7), ("utt", 20),
                  ("shard-end", 0), ("shard-end", 1), ("manifest", 0), ("rename", 0),
                  ("after-rename", 0)]
        for previous in (False, True):
            for phase, n in phases:
                with self.subTest(phase=phase, n=n, previous=previous):
                    d, out = self.work(previous)
                    r = run("pack", self.raw, out, *self.opts(),
                            env={"CXS_PACK_FAULT": f"kill:{phase}:{n}"})
                    self.assertEqual(r.returncode, -signal.SIGKILL, r.stderr)
                    state = self.check_state(d, out, previous)
                    # Only after the rename may OUT hold the new dataset.
                    self.assertEqual(state == "new", phase == "after-rename")
                    self.rerun(d, out)

    def test_kill_at_random_moments(self):
        rng = random.Random(7)

        def tmp_left(d):
            return any(n.startswith(".out.tmp-") for n in os.listdir(d))

        def writing(d, p):
            """Wait until the pack writes (its temporary directory exists)."""
            t1 = time.perf_counter()
            while p.poll() is None and time.perf_counter() - t1 < 10 and not tmp_left(d):
                time.sleep(0.001)

        # How long the writing lasts (from the temporary directory's
        # creation to the end), the median of three packs: kills are drawn
        # within it, so that they meet the writing whatever the machine's pace.
        spans = []
        for _ in range(3):
            d = tempfile.mkdtemp(dir=self.tmp)
            p = subprocess.Popen([EXE, "pack", self.raw, os.path.join(d, "out"), *self.opts(),
                                  "--quiet"])
            writing(d, p)
            t1 = time.perf_counter()
            p.wait()
            spans.append(time.perf_counter() - t1)
            shutil.rmtree(d)
        duration = sorted(spans)[1]
        landed = 0
        for i in range(16):
            previous = i % 2 == 1
            d, out = self.work(previous)
            p = subprocess.Popen([EXE, "pack", self.raw, out, *self.opts(), "--quiet"])
            writing(d, p)  # then a random moment of the writing
            time.sleep(rng.uniform(0, duration * 0.7))
            p.send_signal(signal.SIGKILL)
            rc = p.wait()
            # mid-write: killed while running, its temporary directory left
            if rc == -signal.SIGKILL and tmp_left(d):
                landed += 1
            self.check_state(d, out, previous)
            self.rerun(d, out)
        # the test means something only if the kills met the writing
        print(f"random kills: {landed} of 16 landed mid-write (writing lasts {duration:.3f} s)",
              file=sys.stderr)
        self.assertGreaterEqual(landed, 9, f"only {landed} of 16 kills landed mid-write")

    @needs_hooks
    def test_interrupt_cleans_up(self):
        d, out = self.work(True)
        # The packer stalls after its 5th utterance; SIGINT arrives then.
        p = subprocess.Popen([EXE, "pack", self.raw, out, *self.opts(), "--quiet"],
                             env=dict(os.environ, CXS_PACK_FAULT="stall:utt:4"),
                             stderr=subprocess.PIPE, text=True)
        wait_for_shard(d)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate()
        self.assertEqual(p.returncode, 3)
        self.assertIn("interrupted; nothing written", err)
        self.assertEqual(self.check_state(d, out, True), "old")
        self.assertEqual(os.listdir(d), ["out"])  # the temporary directory is gone

    @needs_hooks
    def test_running_pack_is_not_stale(self):
        """A second pack removes what dead packs left, never a running one's."""
        d, out = self.work(True)
        a = subprocess.Popen([EXE, "pack", self.raw, out, *self.opts(), "--quiet"],
                             env=dict(os.environ, CXS_PACK_FAULT="stall:utt:4"),
                             stderr=subprocess.PIPE, text=True)
        running = [wait_for_shard(d)]
        r = run("pack", self.raw, out, *self.opts(), "--quiet")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.isdir(os.path.join(d, running[0])))  # still there
        a.send_signal(signal.SIGINT)
        a.communicate()
        self.assertEqual(a.returncode, 3)
        self.assertEqual(os.listdir(d), ["out"])
        self.assertTrue(same_tree(out, self.new))

    @needs_hooks
    def test_out_replaced_before_the_rename(self):
        """OUT is judged when the new dataset is renamed into place: an OUT
        that someone replaced by a directory of their own while pack ran is
        left alone, named, and nothing is written (exit 2)."""
        d, out = self.work(True)
        p = subprocess.Popen([EXE, "pack", self.raw, out, *self.opts(), "--quiet"],
                             env=dict(os.environ, CXS_PACK_FAULT="stall:rename:0"),
                             stderr=subprocess.PIPE, text=True)
        end = time.monotonic() + 60
        while not any(n.startswith(".out.tmp-") and
                      os.path.exists(os.path.join(d, n, "manifest.cxs")) for n in os.listdir(d)):
            self.assertLess(time.monotonic(), end, "the pack did not reach its rename")
            time.sleep(0.02)
        os.rename(out, os.path.join(d, "moved"))
        os.mkdir(out)
        with open(os.path.join(out, "precious.txt"), "w") as f:
            f.write("keep me")
        _, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 2, err)
        self.assertIn(f"{out}: exists and is not a ctxshard dataset (no manifest.cxs): it "
                      "changed since the writer was created; left alone, nothing written", err)
        self.assertEqual(os.listdir(out), ["precious.txt"])
        self.assertEqual(open(os.path.join(out, "precious.txt")).read(), "keep me")
        self.assertEqual(sorted(os.listdir(d)), ["moved", "out"])

    @needs_hooks
    def test_disk_full_injected(self):
        total = sum(os.path.getsize(os.path.join(self.new, n)) for n in os.listdir(self.new))
        for limit in (1, 5000, total // 3, total - 10000, total - 1):
            for previous in (False, True):
                with self.subTest(limit=limit, previous=previous):
                    d, out = self.work(previous)
                    r = run("pack", self.raw, out, *self.opts(), "--quiet",
                            env={"CXS_PACK_FAULT": f"enospc:{limit}"})
                    self.assertEqual(r.returncode, 3, r.stderr)
                    self.assertIn("No space left on device", r.stderr)
                    self.assertIn(out, r.stderr)
                    self.assertEqual(self.check_state(d, out, previous),
                                     "old" if previous else "none")
                    self.assertEqual(os.listdir(d), ["out"] if previous else [])
                    self.rerun(d, out)

    @needs_hooks
    def test_merge_killed_or_disk_full(self):
        """merge writes through the same commit: the same guarantees."""
        parts = []
        for i in (1, 2):
            p = os.path.join(self.tmp, f"part{i}")
            if not os.path.exists(p):
                r = run("pack", self.raw, p, "--part", f"{i}/2", *self.opts(), "--quiet")
                self.assertEqual(r.returncode, 0, r.stderr)
            parts.append(p)
        faults = [f"kill:{phase}:{n}" for phase, n in
                  [("shard-end", 0), ("shard-end", 2), ("manifest", 0), ("rename", 0),
                   ("after-rename", 0)]] + ["enospc:1"]
        for previous in (False, True):
            for fault in faults:
                with self.subTest(fault=fault, previous=previous):
                    d, out = self.work(previous)
                    r = run("merge", *parts, out, env={"CXS_PACK_FAULT": fault})
                    if fault.startswith("kill"):
                        self.assertEqual(r.returncode, -signal.SIGKILL, r.stderr)
                    else:
                        self.assertEqual(r.returncode, 3, r.stderr)
                        self.assertIn("No space left on device", r.stderr)
                    state = self.check_state(d, out, previous)
                    self.assertEqual(state == "new", fault == "kill:after-rename:0")
                    r = run("merge", *parts, out, "--quiet")
                    self.assertEqual(r.returncode, 0, r.stderr)
                    self.assertTrue(same_tree(out, self.new))
                    self.assertEqual(os.listdir(d), ["out"])

    @unittest.skipIf(HOOKS, "a build with the test hooks: the cases above use them")
    def test_no_hooks_without_the_option(self):
        """A build users install has no fault injection: CXS_PACK_FAULT set
        to a full disk or a kill changes nothing."""
        for fault in ("enospc:1", "kill:rename:0", "kill:utt:0", "stall:utt:0"):
            with self.subTest(fault=fault):
                d, out = self.work(True)
                r = run("pack", self.raw, out, *self.opts(), "--quiet",
                        env={"CXS_PACK_FAULT": fault})
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(r.stderr, "")
                self.assertTrue(same_tree(out, self.new))
                self.assertEqual(run("verify", out).returncode, 0)

    def test_disk_full_tmpfs(self):
        mnt = os.path.join(self.tmp, "small")
        os.mkdir(mnt)
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt],
                          capture_output=True).returncode != 0:
            self.skipTest("cannot mount a tmpfs here (needs root)")
        try:
            out = os.path.join(mnt, "out")
            r = run("pack", self.raw, out, "--quiet")
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertIn("No space left on device", r.stderr)
            self.assertEqual(os.listdir(mnt), [])
        finally:
            subprocess.run(["umount", mnt])


if __name__ == "__main__":
    if not HOOKS:
        print("SKIP: the cases that need the test hooks (built without -Dtest_hooks=true)",
              flush=True)
    unittest.main(argv=sys.argv[:1], verbosity=1)
