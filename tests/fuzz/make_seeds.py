"""Write the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).
Fuzzing adds what it finds next to them (bench/fuzz.sh).

usage: /usr/bin/python3 tests/fuzz/make_seeds.py"""
import io
import os
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "..", "golden", "valid", "tiny")


def npy(arr, version=None):
    b = io.BytesIO()
    if version:
        np.lib.format.write_array(b, arr, version=version)
    else:
        np.save(b, arr)
    return b.getvalue()


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def main():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 3)).astype(np.float32)
    put("npy", "f32", npy(x))
    put("npy", "f64-be", npy(x.astype(">f8")))
    put("npy", "f16", npy(x.astype(np.float16)))
    put("npy", "fortran", npy(np.asfortranarray(x)))
    put("npy", "v2", npy(x, (2, 0)))
    put("npy", "v3", npy(x, (3, 0)))
    put("npy", "nan", npy(np.array([[np.nan, 1.0]], np.float32)))
    put("npy", "int", npy(np.arange(6, dtype=np.int32).reshape(2, 3)))
    put("npy", "empty", npy(np.zeros((0, 3), np.float32)))
    t = np.array(["[SOS]", "AA", "B", "[SIL]", "[EOS]"])
    pre = struct.pack("<H", 3)
    put("transcript", "u5", pre + npy(t))
    put("transcript", "s5", pre + npy(t.astype("S5")))
    put("transcript", "i8", pre + npy(np.array([40, 1, 7, 0, 41], dtype=np.int64)))
    put("transcript", "u2-be", pre + npy(np.array([40, 1, 7, 0, 41], dtype=">u2")))
    put("transcript", "length", struct.pack("<H", 9) + npy(t))
    put("transcript", "unknown", pre + npy(np.array(["[SOS]", "QQ", "B", "C", "[EOS]"])))
    shard = open(os.path.join(GOLDEN, "shard-000000.cxs"), "rb").read()
    manifest = open(os.path.join(GOLDEN, "manifest.cxs"), "rb").read()
    put("shard", "tiny", shard)
    put("shard", "truncated", shard[:4096 + 64])
    put("manifest", "tiny", struct.pack("<I", len(manifest)) + manifest + shard)


if __name__ == "__main__":
    main()
