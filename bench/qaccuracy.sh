#!/bin/sh
# qaccuracy.sh - the docs' two training examples on the same data stored
# as float32 and as q8 (and q16): the frame classifier (examples/
# train_mlp.py, dev accuracy) and the CTC model (examples/train_ctc.py, dev
# phoneme error rate), same seed, same order, same options; only the
# stored dtype differs.  The splits are synthesised by `ctxshard synth`
# and packed with per-utterance normalisation (the examples' --synth).
#
# usage: bench/qaccuracy.sh CTXSHARD WORKDIR [EPOCHS [TRAIN_UTTS]] (dev: a fifth)
set -eu
x=$1 w=$2 epochs=${3:-3} utts=${4:-300}
py=/usr/bin/python3
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$w"
"$x" synth "$w/train-raw" --utts "$utts" --seed 1 --quiet
"$x" synth "$w/dev-raw" --utts $((utts / 5)) --offset "$utts" --seed 1 --quiet
for dt in f32 q8 q16; do
  for s in train dev; do
    "$x" pack "$w/$s-raw" "$w/$s-$dt" --dtype "$dt" --normalize utterance --transcripts both --quiet
  done
done
for dt in f32 q8 q16; do
  echo "== $dt: frame classifier (examples/train_mlp.py --epochs $epochs)"
  "$py" "$here/examples/train_mlp.py" --train "$w/train-$dt" --dev "$w/dev-$dt" --epochs "$epochs" --seed 3 | tail -n 2
  echo "== $dt: CTC (examples/train_ctc.py --epochs $epochs)"
  "$py" "$here/examples/train_ctc.py" --train "$w/train-$dt" --dev "$w/dev-$dt" --epochs "$epochs" --seed 3 | tail -n 2
done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
