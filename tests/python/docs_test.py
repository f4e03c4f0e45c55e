"""The documentation works as written: every shell command and Python
snippet of README.md, docs/guide.md and docs/python.md is extracted and run
against small datasets built here, and the README's C example is compiled
against the built library and run on a labelled and a features-only
dataset.  No file of the tree holds a merge's conflict markers.

How the markdown says what a block is:
- ```sh and ```python blocks are run; blocks without a language (usage
  listings, diagrams, layouts) are not code;
- a block that is an illustration (the reader's own data, a GPU, a
  cluster, the network) is preceded by `<!-- not run: REASON -->`, and
  counted as skipped with its reason;
- the README's first block, the two set-up commands, is skipped by name
  (it builds and tests the checkout this test runs in; CI runs it).

The names the docs leave to the reader exist here: RAW (a raw dataset), OUT,
TRAIN, DEV, TEST, train.cxs (packed), /data/... (under the work directory),
and for Python path, context, k, i, frames, make_model(), train_step(),
corpus(), epochs, model.

usage: /usr/bin/python3 tests/python/docs_test.py BUILD_DIR SOURCE_ROOT"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
LIB = os.environ.get("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
DOCS = ["README.md", os.path.join("docs", "guide.md"), os.path.join("docs", "python.md")]
TMP = tempfile.mkdtemp(prefix="ctxshard-docs-")
SKIP = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->")

PRELUDE = '''
import os, sys
import numpy as np
import torch
import ctxshard, ctxshard.torch
path = "train.cxs"
context, k, i, u, frames, batch_size, epochs = 3, 3, 10, 0, [0, 1, 2], 64, 1
out = "written.cxs"
def make_model(input_size):
    return torch.nn.Linear(input_size, 42)
model = make_model(ctxshard.open(path).input_size(30)) if os.path.exists(path) else None
def train_step(*batch):
    pass
def corpus():
    rng = np.random.default_rng(0)
    for u in range(3):
        T = 20 + u
        yield f"u{u}", rng.standard_normal((T, 28)).astype(np.float32), ["AA"] * T
'''


def blocks(doc):
    """(line, language, text, skip reason or None) of every fenced block."""
    with open(os.path.join(SRC, doc)) as f:
        lines = f.read().split("\n")
    out, n = [], 0
    while n < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[n])
        if m:
            end = n + 1
            while not lines[end].startswith("```"):
                end += 1
            before, j = [], n - 1  # the comment lines right above the block
            while j >= 0 and lines[j].strip().startswith("<!--"):
                before.append(lines[j])
                j -= 1
            skip = SKIP.search("\n".join(before))
            out.append((n + 1, m.group(1), "\n".join(lines[n + 1:end]),
                        skip.group(1) if skip else None))
            n = end
        n += 1
    return out


def setUpModule():
    def run(*a):
        subprocess.run([EXE, *a, "--quiet"], check=True, cwd=TMP)
    run("synth", "RAW", "--utts", "40", "--seed", "1")
    run("pack", "RAW", "OUT")
    run("synth", "DEVRAW", "--utts", "6", "--seed", "2", "--offset", "40")
    run("pack", "DEVRAW", "DEV")
    run("synth", "TESTRAW", "--utts", "4", "--seed", "3", "--offset", "46", "--no-transcripts")
    run("pack", "TESTRAW", "TEST")
    for name in ("TRAIN", "train.cxs", os.path.join("data", "train.cxs")):
        os.makedirs(os.path.dirname(os.path.join(TMP, name)) or TMP, exist_ok=True)
        shutil.copytree(os.path.join(TMP, "OUT"), os.path.join(TMP, name))
    os.makedirs(os.path.join(TMP, "bin"))
    os.symlink(EXE, os.path.join(TMP, "bin", "ctxshard"))


def tearDownModule():
    shutil.rmtree(TMP)


def env():
    return dict(os.environ, PATH=os.path.join(TMP, "bin") + os.pathsep + os.environ["PATH"],
                PYTHONPATH=os.path.join(SRC, "python"), CTXSHARD_LIB=LIB,
                CTXSHARD_MEMORY_AVAILABLE=str(1 << 30))


def writes(text, name):
    """Whether the snippet makes dataset `name` itself (pack, merge, convert
    or a Writer into it): it must not be there beforehand."""
    n = re.escape(name)
    return bool(re.search(rf"\b(pack|convert)\s+\S+\s+{n}(\s|$)", text) or
                re.search(rf"\bmerge\b[^\n#]*\s{n}(\s|$)", text) or
                re.search(rf"Writer\(\s*[\"']{n}[\"']", text))


def localise(text):
    """The docs' paths, here: /data/... under the work directory, the
    checkout's build/ the build being tested."""
    return (text.replace("/data/", os.path.join(TMP, "data") + "/")
            .replace("build/tools/ctxshard", EXE))


class Docs(unittest.TestCase):
    def test_snippets(self):
        ran, skipped, failed = [], [], []
        for doc in DOCS:
            for line, lang, text, skip in blocks(doc):
                where = f"{doc}:{line}"
                if lang not in ("sh", "python", "c"):
                    continue  # not code: usage listings, diagrams, layouts
                if lang == "c":
                    continue  # test_readme_c_example
                if doc == "README.md" and "scripts/test.sh" in text:
                    skip = "the set-up commands: they build and test the checkout this runs in"
                if skip:
                    skipped.append(f"{where} ({skip})")
                    continue
                work = tempfile.mkdtemp(dir=TMP)
                for name in ("RAW", "OUT", "DEV", "TEST", "TRAIN", "train.cxs", "bin", "data"):
                    if not writes(text, name):
                        os.symlink(os.path.join(TMP, name), os.path.join(work, name))
                if lang == "sh":
                    argv = ["sh", "-eu", "-c", localise(text)]
                else:
                    argv = ["/usr/bin/python3", "-W", "ignore", "-c", PRELUDE + localise(text)]
                t0 = time.monotonic()
                try:
                    p = subprocess.run(argv, cwd=work, env=env(), capture_output=True, text=True,
                                       stdin=subprocess.DEVNULL, timeout=240)
                except subprocess.TimeoutExpired:
                    failed.append(f"{where} ran past 240 s:\n{text}")
                    continue
                print(f"  {where}: {lang}, {time.monotonic() - t0:.1f} s", file=sys.stderr,
                      flush=True)
                if p.returncode:
                    failed.append(f"{where} exited {p.returncode}:\n{text}\n--- stderr:\n"
                                  f"{p.stderr[-3000:]}")
                ran.append(where)
        print(f"\ndocs: ran {len(ran)} snippets, skipped {len(skipped)}:", file=sys.stderr)
        for s in skipped:
            print(f"  skipped {s}", file=sys.stderr)
        self.assertFalse(failed, "\n\n".join(failed))
        self.assertGreater(len(ran), 10)

    def test_every_skip_has_a_reason(self):
        for doc in DOCS:
            for line, lang, _, skip in blocks(doc):
                if skip is not None:
                    self.assertTrue(skip.strip(), f"{doc}:{line}")
                    self.assertIn(lang, ("sh", "python", "c"), f"{doc}:{line}: only code is run")

    def test_references_are_complete(self):
        """Every command of the ctxshard command (tools/main.c's table) is in
        the README's synopsis and the man page's SYNOPSIS and COMMANDS;
        every CTXSHARD_* variable the code reads is in the man page's
        ENVIRONMENT; the install recipes name Debian's interpreter."""
        main = open(os.path.join(SRC, "tools", "main.c")).read()
        cmds = re.findall(r'^\s*\{"([a-z-]+)", \{O_', main, re.M)
        self.assertIn("bench-utt", cmds)
        readme = open(os.path.join(SRC, "README.md")).read()
        man = open(os.path.join(SRC, "docs", "ctxshard.1")).read().replace("\\-", "-")
        synopsis = man[man.index(".SH SYNOPSIS"):man.index(".SH DESCRIPTION")]
        commands = man[man.index(".SH COMMANDS"):man.index(".SH OPTIONS")]
        environment = man[man.index(".SH ENVIRONMENT"):man.index(".SH FILES")]
        for c in cmds:
            self.assertRegex(readme, rf"(?m)^ctxshard {c} ", f"README synopsis lacks {c}")
            self.assertTrue(f".B ctxshard {c}\n" in synopsis or f".B ctxshard {c} " in synopsis,
                            f"man SYNOPSIS lacks {c}")
            self.assertTrue(f".B {c}\n" in commands or f".B {c} " in commands,
                            f"man COMMANDS lacks {c}")
        read = set()
        for top in ("lib", "tools", os.path.join("python", "ctxshard")):
            for dirpath, _, files in os.walk(os.path.join(SRC, top)):
                for f in files:
                    if f.endswith((".c", ".py")):
                        text = open(os.path.join(dirpath, f), errors="replace").read()
                        read |= set(re.findall(r'getenv\("(CTXSHARD_[A-Z_]+)"\)', text))
                        read |= set(re.findall(r'environ(?:\.get\(|\[)"(CTXSHARD_[A-Z_]+)"', text))
        self.assertIn("CTXSHARD_LIB", read)
        for v in sorted(read):
            self.assertTrue(f".B {v}\n" in environment, f"man ENVIRONMENT lacks {v}")
        for doc in ("README.md", os.path.join("docs", "python.md")):
            for line in open(os.path.join(SRC, doc)):
                if "-m venv" in line:
                    self.assertIn("/usr/bin/python3 -m venv", line, f"{doc}: {line.strip()}")
        self.assertIn("mpirun -n 8 /usr/bin/python3", open(os.path.join(SRC, DOCS[1])).read())

    def test_no_conflict_markers(self):
        """No file of the tree holds a merge's conflict markers: a line that
        starts with seven '<', '=', '>' or '|' followed by a space or the
        line's end (git's own rule, `git diff --check`).  The files are the
        tracked ones (`git ls-files`), or every file under the source root
        when it is not a git checkout (an sdist)."""
        marker = re.compile(rb"^(<{7}|={7}|>{7}|\|{7})(?: |$)", re.M)
        try:
            out = subprocess.run(["git", "-C", SRC, "ls-files", "-z"], capture_output=True,
                                 check=True).stdout
            files = [f for f in out.decode("utf-8", "surrogateescape").split("\0") if f]
        except (OSError, subprocess.CalledProcessError):
            files = []
            for d, dirs, fs in os.walk(SRC):
                dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
                files += [os.path.relpath(os.path.join(d, f), SRC) for f in fs]
        self.assertGreater(len(files), 100)
        found = []
        for f in files:
            p = os.path.join(SRC, f)
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            with open(p, "rb") as fh:
                data = fh.read()
            if b"\0" in data[:8192]:
                continue  # binary: golden vectors, fuzz corpora
            for m in marker.finditer(data):
                line = data.count(b"\n", 0, m.start()) + 1
                text = data[m.start():].split(b"\n", 1)[0].decode("utf-8", "replace")
                found.append(f"{f}:{line}: {text}")
        self.assertFalse(found, "conflict markers left by a merge:\n" + "\n".join(found))

    def test_readme_c_example(self):
        """The README's C program checks every return code: it compiles
        without warnings, runs over a labelled and a features-only dataset,
        and names a missing dataset with exit status 1."""
        cc = shutil.which("cc")
        if not cc:
            self.skipTest("no C compiler")
        src = [t for _, lang, t, _ in blocks("README.md") if lang == "c"]
        self.assertEqual(len(src), 1)
        c = os.path.join(TMP, "count.c")
        with open(c, "w") as f:
            f.write(src[0])
        exe = os.path.join(TMP, "count")
        libdir = os.path.dirname(os.path.abspath(LIB))
        subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", c,
                        "-I" + os.path.join(SRC, "lib", "include"),
                        "-I" + os.path.join(SRC, "format"),
                        "-I" + os.path.join(BUILD, "lib"), "-L" + libdir, "-lctxshard",
                        "-Wl,-rpath," + libdir, "-o", exe], check=True)
        for ds in ("OUT", "TEST"):
            p = subprocess.run([exe, os.path.join(TMP, ds)], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertRegex(p.stdout, r"epoch 1: \d+ windows")
        p = subprocess.run([exe, os.path.join(TMP, "nothing")], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("nothing", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
