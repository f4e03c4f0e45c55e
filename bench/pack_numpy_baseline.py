"""What a user writes today to 'preprocess' HW1P2 data with numpy: load
every file, map phonemes to indices, concatenate, save.  Used by
bench/pack.py as the competitor.  usage: pack_numpy_baseline.py RAW OUT"""
import os
import sys

import numpy as np

PHONEMES = ["[SIL]", "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER",
            "EY", "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P",
            "R", "S", "SH", "T", "TH", "UH", "UW", "V", "W", "Y", "Z", "ZH", "[SOS]", "[EOS]"]


def main(raw, out):
    index = {p: i for i, p in enumerate(PHONEMES)}
    ids = sorted(n[:-4] for n in os.listdir(os.path.join(raw, "mfcc")))
    feats, labels, lengths = [], [], []
    for uid in ids:
        x = np.load(os.path.join(raw, "mfcc", uid + ".npy"))
        t = np.load(os.path.join(raw, "transcript", uid + ".npy"))[1:-1]
        feats.append(x)
        labels.append(np.array([index[p] for p in t], dtype=np.uint8))
        lengths.append(len(x))
    os.makedirs(out, exist_ok=True)
    np.save(os.path.join(out, "features.npy"), np.concatenate(feats))
    np.save(os.path.join(out, "labels.npy"), np.concatenate(labels))
    np.save(os.path.join(out, "lengths.npy"), np.array(lengths, dtype=np.int64))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
