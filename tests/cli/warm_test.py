"""CLI tests of `ctxshard warm`: it reads every byte of the dataset, prints
what it read, refuses (exit 3, reading nothing) a dataset that does not fit
in the memory available, naming both sizes and the block sampler, and warms
anyway with --force; bad values of CTXSHARD_MEMORY_AVAILABLE are named.

usage: /usr/bin/python3 tests/cli/warm_test.py BUILD/tools/ctxshard"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

EXE = os.path.abspath(sys.argv[1])


def run(*args, mem=None):
    env = dict(os.environ)
    env.pop("CTXSHARD_MEMORY_AVAILABLE", None)
    if mem is not None:
        env["CTXSHARD_MEMORY_AVAILABLE"] = mem
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


class Warm(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        raw, cls.ds = os.path.join(cls.tmp, "raw"), os.path.join(cls.tmp, "ds")
        for args in (("synth", raw, "--utts", 20, "--quiet"),
                     ("pack", raw, cls.ds, "--quiet", "--shard-size", "256K")):
            rc, _, err = run(*args)
            assert rc == 0, err
        cls.size = sum(os.path.getsize(os.path.join(cls.ds, n)) for n in os.listdir(cls.ds))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_reads_everything(self):
        rc, out, err = run("warm", self.ds, "--json")
        self.assertEqual(rc, 0, err)
        r = json.loads(out)
        self.assertEqual(r["total_bytes"], self.size)
        self.assertEqual(r["bytes_read"], self.size)
        self.assertTrue(r["fits"])
        self.assertGreater(r["available"], 0)

    def test_summary(self):
        rc, out, err = run("warm", self.ds)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"^%s: [0-9.]+ [KM]iB read in [0-9.]+ s, [0-9.]+ [KMG]?i?B/s "
                         r"\([0-9.]+ [KM]?i?B of it already cached\); [0-9.]+ [KMGT]?i?B of "
                         r"memory available\n$" % self.ds)
        rc, out, err = run("warm", self.ds, "--quiet")
        self.assertEqual((rc, out, err), (0, "", ""))

    def test_does_not_fit(self):
        rc, out, err = run("warm", self.ds, mem="4K")
        self.assertEqual(rc, 3)
        self.assertEqual(out, "")
        self.assertIn("does not fit in the memory available", err)
        self.assertIn("CTXSHARD_MEMORY_AVAILABLE", err)
        self.assertIn('shuffle="block"', err)
        self.assertIn("--sampler block", err)
        self.assertIn("--force", err)
        rc, out, err = run("warm", self.ds, "--force", "--json", mem="4K")
        self.assertEqual(rc, 0, err)
        r = json.loads(out)
        self.assertFalse(r["fits"])
        self.assertEqual(r["bytes_read"], self.size)
        self.assertEqual(r["available"], 4096)

    def test_fits_exactly(self):
        rc, out, err = run("warm", self.ds, "--json", mem=str(self.size))
        self.assertEqual(rc, 0, err)
        self.assertTrue(json.loads(out)["fits"])

    def test_bad_inputs(self):
        rc, _, err = run("warm", self.ds, mem="lots")
        self.assertEqual(rc, 2)
        self.assertIn("CTXSHARD_MEMORY_AVAILABLE: 'lots' is not a size", err)
        rc, _, err = run("warm", os.path.join(self.tmp, "missing"))
        self.assertNotEqual(rc, 0)
        self.assertIn("missing", err)
        rc, _, err = run("warm")
        self.assertEqual(rc, 2)
        rc, _, err = run("warm", self.ds, "--context", 3)
        self.assertEqual(rc, 2)
        self.assertIn("does not apply", err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
