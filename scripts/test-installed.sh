#!/bin/sh
# The Python package as users install it: an sdist (python3 -m build, from
# the committed tree), a wheel built from that sdist with pip (meson-python,
# no package index), installed into a fresh virtual environment that sees
# Debian's numpy and torch, and run the python suite and the CLI tests
# against it from a directory outside the checkout, with no PYTHONPATH or
# CTXSHARD_LIB.  Extra arguments go to `pip wheel` (e.g.
# --config-settings=setup-args=-Dcuda=disabled).  Works in a temporary
# directory outside the checkout (removed at the end), so nothing can be
# imported from the checkout by accident.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/ctxshard-wheel-XXXXXX")
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -m build --sdist --no-isolation --outdir "$work/sdist" "$src"
/usr/bin/python3 -m pip wheel --no-deps --no-build-isolation --wheel-dir "$work/dist" "$@" \
    "$work"/sdist/ctxshard-*.tar.gz
/usr/bin/python3 -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --no-index "$work"/dist/ctxshard-*.whl
py=$work/venv/bin/python
exe=$work/venv/bin/ctxshard
run=$(mktemp -d)
cd "$run"
unset PYTHONPATH CTXSHARD_LIB
# A wheel has no fault-injection hooks: crash_test.py checks that
# CXS_PACK_FAULT changes nothing, and skips the cases that need them.
export CXS_TEST_HOOKS=0
# The man page comes with the wheel: man-db finds it beside the
# environment's bin/ on PATH.
if command -v man >/dev/null 2>&1; then
    PATH="$work/venv/bin:$PATH" man -w ctxshard | grep -q "^$work/venv/" ||
        { echo "man ctxshard: the wheel's page is not found" >&2; exit 1; }
fi
echo "== the installed package: $($exe --version), $("$py" -c 'import ctxshard; print(ctxshard.__file__)')"
"$py" -W ignore "$src/tests/python/test_python.py" --installed "$src"
"$py" "$src/tests/python/dist_test.py" --installed "$src"
"$py" -W ignore "$src/tests/python/seq_test.py" --installed "$src"
"$py" "$src/tests/cli/parallel_test.py" "$exe" "$src"
"$py" -W ignore "$src/tests/cli/cli_test.py" "$exe" "$src"
"$py" -W ignore "$src/tests/cli/hostile_test.py" "$exe"
"$py" -W ignore "$src/tests/cli/stats_test.py" "$exe"
"$py" -W ignore "$src/tests/cli/crash_test.py" "$exe"
cd "$src"
rm -rf "$run"
echo "== the installed package passed"
