#!/bin/sh
# The whole test suite: install what is missing, build into build/, run
# every meson suite (unit, golden, roundtrip, cli).
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
# The S3-compatible server of the URL tests (tests/remote/package.json, at
# the versions of its package-lock.json) and Node.js to run it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm
fi
[ -d tests/remote/node_modules/s3rver ] || npm ci --prefix tests/remote --no-audit --no-fund --loglevel=error
# (the fault-injection hooks the crash and fault tests drive exist only in
# a build that asks for them)
if [ -f build/build.ninja ]; then meson configure build -Dtest_hooks=true
else meson setup build -Dtest_hooks=true; fi
ninja -C build
meson test -C build --print-errorlogs "$@"
