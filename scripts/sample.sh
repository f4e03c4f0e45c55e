#!/bin/sh
# The main job on the built-in sample: install what is missing, build into
# build/, synthesise a raw dataset, check it, pack it, verify it, describe it
# and show one context window.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
[ -f build/build.ninja ] || meson setup build
ninja -C build
exe=build/tools/ctxshard
work=${CTXSHARD_SAMPLE_DIR:-build/sample}
rm -rf "$work"
mkdir -p "$work"
echo "== synth: a raw HW1P2-style dataset"
$exe synth "$work/raw" --utts 1000 --seed 1
echo "== check: validate the raw files"
$exe check "$work/raw"
echo "== pack: convert once"
$exe pack "$work/raw" "$work/packed"
echo "== verify: re-hash every byte"
$exe verify "$work/packed"
echo "== info"
$exe info "$work/packed" | sed -n '1,9p'
echo "== a sample window: frame 0 of the first utterance, context k=2 (5 rows x 28)"
$exe gather "$work/packed" --context 2 --frames 0 --out "$work/window.npy" --labels "$work/label.npy"
/usr/bin/python3 - "$work" <<'PY'
import sys
import numpy as np
w = np.load(sys.argv[1] + "/window.npy").reshape(5, -1)
label = int(np.load(sys.argv[1] + "/label.npy")[0])
np.set_printoptions(precision=2, suppress=True, linewidth=150)
print(w[:, :8], "... label", label)
PY
echo "(rows 0-1 are the zero padding before the utterance's first frame; first 8 of 28 columns shown)"
