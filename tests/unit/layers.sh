#!/bin/sh
# The layers' direction (docs/CONTRIBUTING.md, "The library's layers"): each
# folder of lib/ is compiled with the include directories of its own layer
# and the ones below, so a header of a higher layer included by its bare
# name fails the build.  A path in the include ("../batch/gather.h",
# "lib/batch/ring.h") would get round that: none is allowed in lib/ or
# format/.
#
# Where a block's bytes come from is the block source's alone (lib/source/,
# docs/CONTRIBUTING.md): the loaders and the GPU uploads (lib/batch/,
# lib/gpu/) reach a streamed dataset's cache only through it, never by a
# call of lib/remote/ (a stream's or the cache's function, or its header),
# and ask it whether a dataset is streamed (cxs_src_streamed) rather than
# look at the dataset's stream themselves.
# batch/ is built without remote/'s include directory, so the header
# fails there already; the calls are checked here by name, since a
# declaration written out by hand would get round the build.
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
bad=$(grep -rnE '"remote\.h"|\bcxs_(stream|cache|fetch|push)_[a-z_]+[[:space:]]*\(|\bds->stream\b' \
    lib/batch lib/gpu || true)
if [ -n "$bad" ]; then
    echo "lib/batch and lib/gpu reach lib/remote only through the block source (source.h):"
    echo "$bad"
    exit 1
fi
echo "no include reaches round the layers; batch/ and gpu/ reach remote/ only through the block source"
