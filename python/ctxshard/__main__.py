"""`python -m ctxshard ARGS` and the `ctxshard` command pip installs: both run
the ctxshard program (tools/, C) with ARGS, replacing this process, so its
output, exit status and signals are the program's own.

The program is looked up, in order: inside this package (bin/ctxshard, where
`pip install .` puts it, beside the library), in the checkout's build/tools
(PYTHONPATH=python), and on PATH (after `meson install`)."""
import os
import shutil
import sys

__all__ = ["command", "main"]


def _is_program(path):
    # Only the compiled program: pip's `ctxshard` script on PATH runs this
    # module, and exec'ing it here would loop.
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF" and os.access(path, os.X_OK)
    except OSError:
        return False


def command():
    """Path of the ctxshard program, or None when none is found."""
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "bin", "ctxshard"),
                 os.path.join(here, "..", "..", "build", "tools", "ctxshard"),
                 shutil.which("ctxshard")):
        if path and _is_program(path):
            return os.path.abspath(path)
    return None


def main():
    exe = command()
    if exe is None:
        sys.stderr.write("ctxshard: the ctxshard program is not installed with this package "
                         f"({os.path.dirname(os.path.abspath(__file__))}): install the package "
                         "with `pip install .` from the source tree, or build it with "
                         "`meson setup build && ninja -C build`\n")
        sys.exit(3)
    sys.stdout.flush()
    os.execv(exe, ["ctxshard", *sys.argv[1:]])


if __name__ == "__main__":
    main()
