"""The CPUs the library counts (cxs_cpu_count, ctxshard.cpu_count) and the
thread default built on it (cxs_default_threads): the process's affinity
mask, capped by a CPU quota of its cgroup at any level above it, as a
container, a cluster job or `taskset` set them; seen by the Python
package, the frame Loader's default and the command's `bench-read`.

The quota cases need root and a writable cgroup hierarchy with the cpu
controller (v1 cpu.cfs_quota_us or v2 cpu.max); each case that cannot be
set up here is skipped and says why.  The expected values are computed
here from the mask and the quotas the test itself sets.

usage: /usr/bin/python3 tests/python/cpus_test.py BUILD_DIR SOURCE_ROOT"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
sys.path.insert(0, os.path.join(SRC, "python"))

TMP = tempfile.mkdtemp(prefix="ctxshard-cpus-")
NCPU = len(os.sched_getaffinity(0))

# What a child process reports: the library's two counts and the default
# a frame Loader picks (threads=None).
PROBE = textwrap.dedent("""
    import sys
    sys.path.insert(0, %r)
    import ctxshard, ctxshard.torch as ct
    ld = ct.Loader(%r, 2, 64)
    print(ctxshard.cpu_count(), ctxshard.default_threads(), ld.threads)
""")


def probe(dataset, preexec=None):
    out = subprocess.run([sys.executable, "-c", PROBE % (os.path.join(SRC, "python"), dataset)],
                         check=True, capture_output=True, text=True, preexec_fn=preexec)
    return tuple(int(v) for v in out.stdout.split())


def bench_threads(dataset, preexec=None):
    """The worker count `ctxshard bench-read` chose by default."""
    out = subprocess.run([EXE, "bench-read", dataset, "--context", "2", "--batch", "64",
                          "--batches", "2"], check=True, capture_output=True, text=True,
                         preexec_fn=preexec).stdout
    m = re.search(r"batch 64, (\d+) threads?,", out)
    assert m, out
    return int(m.group(1))


def cpu_mounts():
    """{'v1': mount point of the cgroup v1 hierarchy with the cpu
    controller, 'v2': of cgroup2 if its cpu controller is available},
    read from /proc/self/mountinfo (only hierarchies mounted at their root)."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            lf, rf = left.split(), right.split()
            root, mnt, fstype, sup = lf[3], lf[4], rf[0], rf[2] if len(rf) > 2 else ""
            if root != "/":
                continue
            if fstype == "cgroup" and "cpu" in sup.split(","):
                found.setdefault("v1", mnt)
            if fstype == "cgroup2":
                try:
                    with open(os.path.join(mnt, "cgroup.controllers")) as c:
                        if "cpu" in c.read().split():
                            found.setdefault("v2", mnt)
                except OSError:
                    pass
    return found


def own_cgroup(version):
    """The process's cgroup path in that hierarchy, from /proc/self/cgroup."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, ctrl, path = line.rstrip("\n").split(":", 2)
            if version == "v2" and hid == "0" and ctrl == "":
                return path
            if version == "v1" and "cpu" in ctrl.split(","):
                return path
    return None


class Quota:
    """A cgroup made under the process's own, with a CPU quota of `cpus`
    (None: no quota) at its top level and, when nested is set, a child
    without one; the process started with `preexec` joins the innermost."""

    def __init__(self, version, mnt, cpus, nested=False):
        self.version = version
        base = os.path.join(mnt, own_cgroup(version).lstrip("/"))
        self.top = os.path.join(base, f"ctxshard-test-{os.getpid()}")
        os.mkdir(self.top)
        self.dirs = [self.top]
        period = 100000
        if version == "v2":
            with open(os.path.join(self.top, "cpu.max"), "w") as f:
                f.write(f"{int(cpus * period)} {period}")
        else:
            with open(os.path.join(self.top, "cpu.cfs_period_us"), "w") as f:
                f.write(str(period))
            with open(os.path.join(self.top, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(int(cpus * period)))
        if nested:
            if version == "v2":
                with open(os.path.join(self.top, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
            inner = os.path.join(self.top, "inner")
            os.mkdir(inner)
            self.dirs.append(inner)
        self.procs = os.path.join(self.dirs[-1], "cgroup.procs")

    def preexec(self):
        with open(self.procs, "w") as f:
            f.write(str(os.getpid()))

    def close(self):
        for d in reversed(self.dirs):
            os.rmdir(d)


class Cpus(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ds = os.path.join(TMP, "ds")
        subprocess.run([EXE, "synth", os.path.join(TMP, "raw"), "--utts", "6", "--quiet"],
                       check=True, capture_output=True)
        subprocess.run([EXE, "pack", os.path.join(TMP, "raw"), cls.ds, "--quiet"], check=True,
                       capture_output=True)

    def test_unlimited_is_the_affinity_mask(self):
        n, t, lt = probe(self.ds)
        self.assertEqual(n, NCPU)
        self.assertEqual(t, min(NCPU, 4))
        self.assertEqual(lt, t)

    def test_affinity_mask(self):
        if NCPU < 2:
            self.skipTest("one CPU: a smaller mask cannot be told apart")
        first = sorted(os.sched_getaffinity(0))[0]
        pin = lambda: os.sched_setaffinity(0, {first})  # noqa: E731
        self.assertEqual(probe(self.ds, pin), (1, 1, 1))
        self.assertEqual(bench_threads(self.ds, pin), 1)

    def quota_case(self, cpus, nested=False):
        if NCPU < 2:
            self.skipTest("one CPU: a quota below it cannot be told apart")
        mounts = cpu_mounts()
        if not mounts:
            self.skipTest("no cgroup hierarchy with the cpu controller is mounted")
        ran = 0
        for version, mnt in sorted(mounts.items()):
            try:
                q = Quota(version, mnt, cpus, nested)
            except OSError as e:
                print(f"  (cgroup {version} at {mnt}: {e}; not tested)", file=sys.stderr)
                continue
            try:
                want = min(NCPU, -(-int(cpus * 100000) // 100000))
                self.assertEqual(probe(self.ds, q.preexec), (want, min(want, 4), min(want, 4)),
                                 f"cgroup {version}, quota {cpus} CPUs")
                self.assertEqual(bench_threads(self.ds, q.preexec), min(want, 4))
                ran += 1
            finally:
                q.close()
        if not ran:
            self.skipTest("no cgroup could be made here (root and a writable hierarchy needed)")

    def test_quota_of_one_cpu(self):
        self.quota_case(1.0)

    def test_quota_above_the_process(self):
        """A quota set on a parent cgroup limits a child that has none."""
        self.quota_case(1.0, nested=True)

    def test_fractional_quota_rounds_up(self):
        """0.5 CPU allows one thread, never zero."""
        self.quota_case(0.5)


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1], verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
