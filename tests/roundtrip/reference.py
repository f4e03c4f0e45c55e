"""Independent reference for ctxshard: computes context windows, labels and
statistics straight from the raw .npy files with numpy, sharing no code with
the C implementation."""
import os

import numpy as np

PHONEMES = ["[SIL]", "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH",
            "EH", "ER", "EY", "F", "G", "HH", "IH", "IY", "JH", "K", "L", "M",
            "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH", "UW",
            "V", "W", "Y", "Z", "ZH", "[SOS]", "[EOS]"]


def utterance_ids(raw):
    names = [n for n in os.listdir(os.path.join(raw, "mfcc")) if n.lower().endswith(".npy")]
    ids = [n[:-4] for n in names]
    return sorted(ids, key=lambda s: s.encode())


def to_f16(x):
    return np.asarray(x, dtype=np.float64).astype(np.float16).astype(np.float32)


def to_bf16(x):
    """Round float64 to bfloat16 (nearest even) directly, without going
    through float32, using exact integer arithmetic on the float64 bits."""
    x = np.asarray(x, dtype=np.float64)
    bits = x.view(np.uint64)
    sign = (bits >> np.uint64(63)).astype(np.uint64)
    exp = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    man = (bits & np.uint64((1 << 52) - 1)) | np.uint64(1 << 52)
    out = np.zeros(x.shape, dtype=np.float64)
    for idx in np.ndindex(x.shape):
        e = int(exp[idx]) - 1023
        m = int(man[idx])
        if exp[idx] == 0:
            out[idx] = 0.0
            continue
        # bfloat16: 8 significant bits for normals, exponent >= -126
        shift = 52 - 7 if e >= -126 else 52 - 7 + (-126 - e)
        q, rem = m >> shift, m & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        if rem > half or (rem == half and q & 1):
            q += 1
        val = float(q) * 2.0 ** (e - 52 + shift)
        out[idx] = -val if sign[idx] else val
    return out.astype(np.float32)


def load_utterance(raw, uid, dtype="f32", normalize=False, vocab=PHONEMES):
    x = np.load(os.path.join(raw, "mfcc", uid + ".npy")).astype(np.float64)
    if normalize:
        # Sequential sums in frame order (np.cumsum), as the spec defines.
        T = x.shape[0]
        mean = np.cumsum(x, axis=0)[-1] / T
        var = np.cumsum(x * x, axis=0)[-1] / T - mean * mean
        std = np.sqrt(np.maximum(var, 0))
        std[std == 0] = 1.0
        x = (x - mean) / std
    if dtype == "f32":
        f = x.astype(np.float32)
    elif dtype == "f16":
        f = to_f16(x)
    else:
        f = to_bf16(x)
    tpath = os.path.join(raw, "transcript", uid + ".npy")
    labels = None
    if os.path.exists(tpath):
        t = np.load(tpath)
        index = {s: i for i, s in enumerate(vocab)}
        labels = np.array([index[str(s)] for s in t[1:-1]], dtype=np.int64)
    return f, labels


def windows(feats, k):
    """All (2k+1)*D windows of one utterance, zero-padded at its borders."""
    T, D = feats.shape
    padded = np.zeros((T + 2 * k, D), dtype=np.float32)
    padded[k:k + T] = feats
    idx = np.arange(T)[:, None] + np.arange(2 * k + 1)[None, :]
    return padded[idx].reshape(T, (2 * k + 1) * D)


def dataset(raw, dtype="f32", normalize=False):
    """(windows-ready features per utterance, labels per utterance), in id order."""
    ids = utterance_ids(raw)
    return ids, [load_utterance(raw, u, dtype, normalize) for u in ids]
