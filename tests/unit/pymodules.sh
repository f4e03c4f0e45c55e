#!/bin/sh
# Every module of the Python package is installed: python/meson.build lists
# them one a line (a wheel and `ninja install` carry only what it lists), so
# a module added to python/ctxshard/ and not to the list imports from the
# checkout and fails in an installed package.
#
# usage: pymodules.sh SOURCE_ROOT
set -eu
root=$1
status=0
for f in "$root"/python/ctxshard/*.py; do
    m=ctxshard/$(basename "$f")
    grep -q "^ *'$m',\$" "$root/python/meson.build" ||
        { echo "python/meson.build does not list $m: an installed package would lack it" >&2; status=1; }
done
exit $status
