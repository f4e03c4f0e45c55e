#!/bin/sh
# The layers' direction (docs/CONTRIBUTING.md, "The library's layers"): each
# folder of lib/ is compiled with the include directories of its own layer
# and the ones below, so a header of a higher layer included by its bare
# name fails the build.  A path in the include ("../batch/gather.h",
# "lib/batch/ring.h") would get round that: none is allowed in lib/ or
# format/.
#
# usage: layers.sh SOURCE_ROOT
set -eu
cd "$1"
bad=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]*/' lib format || true)
if [ -n "$bad" ]; then
    echo "an include with a path in it (name the header alone; a layer sees only its own"
    echo "and lower layers' folders):"
    echo "$bad"
    exit 1
fi
echo "no include reaches round the layers"
