#!/bin/sh
# The whole test suite: install what is missing, build into build/, run
# every meson suite (unit, golden, roundtrip, cli).
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
meson test -C build --print-errorlogs "$@"
