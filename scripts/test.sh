#!/bin/sh
# The whole test suite: install what is missing, build into build/, run
# every meson suite (unit, golden, roundtrip, cli).
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
# (the fault-injection hooks the crash and fault tests drive exist only in
# a build that asks for them)
if [ -f build/build.ninja ]; then meson configure build -Dtest_hooks=true
else meson setup build -Dtest_hooks=true; fi
ninja -C build
meson test -C build --print-errorlogs "$@"
