"""Packing in parts under job launchers: `ctxshard pack --part env` takes
its part from a Slurm array task or an MPI rank (and names the variables
when there is none); the guide's Slurm and mpirun recipes, run as written
(under a real `mpirun` with 3 ranks), give a merged dataset byte-identical
to a single pack.

The recipes are read from docs/guide.md (the blocks after
`<!-- recipe: NAME -->`) and run with sh, changing only /data/ to a
temporary directory and mpirun's rank count to 3.  They make no directory
(pack creates the parts' parent) and give no --shard-size (the parts
choose one that gives each of them work; the merge equals a single pack
with that size).

usage: /usr/bin/python3 tests/cli/parallel_test.py CTXSHARD SOURCE_ROOT"""
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

EXE = os.path.abspath(sys.argv[1])
SRC = os.path.abspath(sys.argv[2])
LAUNCHER_VARS = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX",
                 "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_STEP", "OMPI_COMM_WORLD_RANK",
                 "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK",
                 "SLURM_STEP_NUM_TASKS")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    env["PATH"] = os.path.dirname(EXE) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def run(*args, env=None):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True,
                          env=env or clean_env())


def same_tree(a, b):
    names = sorted(os.listdir(a))
    if names != sorted(os.listdir(b)):
        return False
    return all(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False) for n in names)


def recipe(name, data):
    with open(os.path.join(SRC, "docs", "guide.md"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"<!-- recipe: " + name + r" -->\s*```sh\n(.*?)```", text, re.S)
    assert m, f"docs/guide.md has no recipe '{name}'"
    block = m.group(1)
    assert "/data/" in block and "mkdir" not in block, block
    return block.replace("/data/", data + "/").replace("mpirun -n 8", "mpirun -n 3")


class PartEnv(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ctxshard-parallel-")
        cls.raw = os.path.join(cls.tmp, "raw")
        cls.single = os.path.join(cls.tmp, "single")
        r = run("synth", cls.raw, "--utts", 12, "--seed", 8, "--quiet")
        assert r.returncode == 0, r.stderr
        r = run("pack", cls.raw, cls.single, "--shard-size", "300K", "--quiet")
        assert r.returncode == 0, r.stderr
        assert len([n for n in os.listdir(cls.single) if n.startswith("shard-")]) >= 3
        # What 3 parts without --shard-size choose, and the single pack it equals.
        r = run("pack", cls.raw, os.path.join(cls.tmp, "probe"), "--part", "1/3")
        assert r.returncode == 0, r.stderr
        m = re.search(r"merge gives the bytes of `ctxshard pack \S+ OUT --shard-size (\S+)`",
                      r.stderr)
        assert m, r.stderr
        cls.auto = os.path.join(cls.tmp, "auto")
        r = run("pack", cls.raw, cls.auto, "--shard-size", m.group(1), "--quiet")
        assert r.returncode == 0, r.stderr
        assert len([n for n in os.listdir(cls.auto) if n.startswith("shard-")]) == 3

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def pack_part(self, out, part, env):
        return run("pack", self.raw, out, "--shard-size", "300K", "--part", part, "--quiet",
                   env=env)

    def test_from_each_launcher(self):
        cases = [("2/3", dict(OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="3", PMIX_RANK="1")),
                 ("3/3", dict(PMI_RANK="2", PMI_SIZE="3")),
                 ("1/3", dict(PMIX_RANK="0", SLURM_STEP_NUM_TASKS="3")),
                 ("2/3", dict(SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_TASK_MIN="0",
                              SLURM_ARRAY_TASK_MAX="2", SLURM_ARRAY_TASK_COUNT="3")),
                 ("3/3", dict(SLURM_ARRAY_TASK_ID="3", SLURM_ARRAY_TASK_MIN="1",
                              SLURM_ARRAY_TASK_COUNT="3"))]
        for i, (part, env) in enumerate(cases):
            want, got = os.path.join(self.tmp, f"want{i}"), os.path.join(self.tmp, f"got{i}")
            r = self.pack_part(want, part, clean_env())
            self.assertEqual(r.returncode, 0, r.stderr)
            r = run("pack", self.raw, got, "--shard-size", "300K", "--part", "env",
                    env=clean_env(**env))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"part {part} (", r.stderr)
            self.assertTrue(same_tree(want, got), (part, env))

    def test_refusals_name_the_variables(self):
        r = self.pack_part(os.path.join(self.tmp, "none"), "env", clean_env())
        self.assertEqual(r.returncode, 2)
        for var in ("SLURM_ARRAY_TASK_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                    "--part I/N"):
            self.assertIn(var, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "none")))
        r = self.pack_part(os.path.join(self.tmp, "half"), "env",
                           clean_env(OMPI_COMM_WORLD_RANK="1"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("OMPI_COMM_WORLD_SIZE is not", r.stderr)
        r = self.pack_part(os.path.join(self.tmp, "bad"), "env",
                           clean_env(PMI_RANK="3", PMI_SIZE="3"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("PMI_RANK=3 is not below PMI_SIZE=3", r.stderr)

    def test_slurm_recipe(self):
        data = os.path.join(self.tmp, "slurm")
        os.makedirs(data)
        os.symlink(self.raw, os.path.join(data, "raw"))
        pack = recipe("slurm", data)
        for task in (1, 2, 3):  # what sbatch --array=1-3 sets for each task
            env = clean_env(SLURM_ARRAY_TASK_ID=str(task), SLURM_ARRAY_TASK_MIN="1",
                            SLURM_ARRAY_TASK_MAX="3", SLURM_ARRAY_TASK_COUNT="3",
                            SLURM_ARRAY_TASK_STEP="1")
            r = subprocess.run(["sh", "-euc", pack], env=env, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
        r = subprocess.run(["sh", "-euc", recipe("slurm-merge", data)], env=clean_env(),
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(same_tree(self.auto, os.path.join(data, "train.cxs")))

    @unittest.skipUnless(shutil.which("mpirun"), "mpirun not installed (openmpi-bin)")
    def test_mpirun_recipe(self):
        data = os.path.join(self.tmp, "mpi")
        os.makedirs(data)
        os.symlink(self.raw, os.path.join(data, "raw"))
        # 3 ranks on however many cores, and as root in a container
        env = clean_env(OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        r = subprocess.run(["sh", "-euc", recipe("mpirun", data)], env=env, capture_output=True,
                           text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(sorted(os.listdir(os.path.join(data, "parts"))), ["p0", "p1", "p2"])
        self.assertTrue(same_tree(self.auto, os.path.join(data, "train.cxs")))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
