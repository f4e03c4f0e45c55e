"""What the Python tests share: the checkout's build that a test run from
meson names (argv: BUILD_DIR SOURCE_ROOT), the command there, and the
byte comparison of two datasets.  from_build() must run before the
package is imported: it points the package at the build's library."""
import filecmp
import os
import subprocess
import sys

EXE = None


def from_build():
    """BUILD_DIR, SOURCE_ROOT and the command; the package and its library
    are then imported from them."""
    global EXE
    build, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    EXE = os.path.join(build, "tools", "ctxshard")
    os.environ.setdefault("CTXSHARD_LIB", os.path.join(build, "lib", "libctxshard.so"))
    sys.path.insert(0, os.path.join(src, "python"))
    return build, src, EXE


def run(*args, cwd=None):
    """The command with args (from_build's), its output captured as text."""
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True, cwd=cwd)


def same_dataset(a, b):
    """None when directories a and b hold the same files, byte for byte;
    else what differs."""
    fa, fb = sorted(os.listdir(a)), sorted(os.listdir(b))
    if fa != fb:
        return f"files differ: {fa} vs {fb}"
    for f in fa:
        if not filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False):
            return f"{f} differs"
    return None
