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


def zframe(content, fcs=True, checksum=False, dict_id=0, skippable=False):
    """One zstd frame holding `content` in a single raw block (RFC 8878),
    with or without Frame_Content_Size, a Content_Checksum (a wrong one:
    the reader must check it) or a Dictionary_ID."""
    if skippable:
        return struct.pack("<II", 0x184D2A50, len(content)) + content
    fhd = (0x20 if fcs else 0) | (0x04 if checksum else 0) | (1 if dict_id else 0)
    out = struct.pack("<I", 0xFD2FB528) + bytes([fhd])
    if not fcs:
        out += bytes([0x00])  # Window_Descriptor: 1 KiB window
    if dict_id:
        out += bytes([dict_id])
    if fcs:
        out += bytes([len(content)])  # single segment, 1-byte size (< 256)
    out += struct.pack("<I", 1 | (len(content) << 3))[:3] + content  # last, raw
    if checksum:
        out += b"\0\0\0\0"
    return out


def section(data, t):
    n = struct.unpack_from("<I", data, 24)[0]
    for i in range(n):
        typ, _, off, ln, _ = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
        if typ == t:
            return off, ln, 64 + 32 * i
    raise KeyError(t)


def with_chunks(shard, frames):
    """The shard with its chunks replaced by `frames` (ends, lengths and
    offsets set; fuzz_zshard recomputes every checksum)."""
    d = bytearray(shard)
    zoff, zlen, ze = section(d, 6)
    coff, clen, _ = section(d, 7)
    z = b"".join(frames)
    assert len(z) <= 4096, "ZFEATURES must keep its page"
    d[zoff:zoff + 4096] = z + bytes(4096 - len(z))
    struct.pack_into("<Q", d, ze + 16, len(z))
    struct.pack_into("<Q", d, coff + 24, len(frames))
    end = 0
    for c, f in enumerate(frames):
        end += len(f)
        struct.pack_into("<Q", d, coff + 64 + 16 * c, end)
    return bytes(d)


def zshard_seeds():
    """Compressed shards (the golden vectors) and mutations of their CHUNKS
    and ZFEATURES that a reader must refuse or read."""
    valid = os.path.join(HERE, "..", "golden", "valid")
    z = open(os.path.join(valid, "tiny-zstd", "shard-000000.cxs"), "rb").read()
    zn = open(os.path.join(valid, "tiny-zstd-noshuffle", "shard-000000.cxs"), "rb").read()
    put("zshard", "tiny-zstd", z)
    put("zshard", "tiny-zstd-noshuffle", zn)
    coff, _, _ = section(zn, 7)
    for name, off, fmt, val in [("codec", 0, "<I", 2), ("filter", 4, "<I", 7),
                                ("raw-length", 8, "<Q", 72), ("chunk-rows", 16, "<I", 4),
                                ("num-chunks", 24, "<Q", 3), ("reserved", 40, "<I", 1)]:
        d = bytearray(zn)
        struct.pack_into(fmt, d, coff + off, val)
        put("zshard", "head-" + name, bytes(d))
    # tiny's FEATURES rows (8 rows of 2 float32), as raw frames: 5 + 3 rows
    feats = open(os.path.join(GOLDEN, "shard-000000.cxs"), "rb").read()
    foff, flen, _ = section(feats, 4)
    rows = feats[foff:foff + flen]
    c0, c1 = rows[:40], rows[40:]
    put("zshard", "raw-frames", with_chunks(zn, [zframe(c0), zframe(c1)]))
    put("zshard", "no-content-size", with_chunks(zn, [zframe(c0, fcs=False), zframe(c1)]))
    put("zshard", "content-checksum", with_chunks(zn, [zframe(c0, checksum=True), zframe(c1)]))
    put("zshard", "dictionary", with_chunks(zn, [zframe(c0, dict_id=7), zframe(c1)]))
    put("zshard", "skippable", with_chunks(zn, [zframe(c0, skippable=True), zframe(c1)]))
    put("zshard", "trailing", with_chunks(zn, [zframe(c0) + b"\0", zframe(c1)]))
    put("zshard", "short-frame", with_chunks(zn, [zframe(c0[:32]), zframe(c1)]))
    put("zshard", "nan-row", with_chunks(zn, [zframe(c0[:12] + b"\0\0\xc0\x7f" + c0[16:]),
                                              zframe(c1)]))
    put("zshard", "guard-row", with_chunks(zn, [zframe(b"\1" + c0[1:]), zframe(c1)]))


def kaldi_seeds():
    """Archives of every object type (tests/python/kaldi_ref.py encodes
    them); the first byte is the target's mode (bit 0: through an scp,
    bit 1: skip bad utterances)."""
    import sys
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import kaldi_ref as K
    rng = np.random.default_rng(1)
    m = rng.normal(size=(9, 3)).astype(np.float32)
    objs = [(k, K.encode(m[:, 0] if k in ("FV", "DV") else m, k))
            for k in ("FM", "DM", "CM", "CM2", "CM3", "FV", "DV")]
    ark = b"".join(f"u{i} ".encode() + o for i, (_, o) in enumerate(objs))
    for mode in (0, 1, 2, 3):
        put("kaldi", f"all-{mode}", bytes([mode]) + ark)
    for k, o in objs:
        put("kaldi", k.lower(), b"\0" + b"a " + o + b"b " + o)
    put("kaldi", "text-form", b"\0a [ 1 2\n 3 4 ]\n")
    # text forms, ranges (bit 2 of the mode), reader threads and float16 (bit 7)
    txt = b"".join(f"t{i} ".encode() + K.encode_text(m[:i + 1])[0] for i in range(4))
    put("kaldi", "text-ark", b"\x02" + txt + b"x [ 1 -2e3 ; 4 nan ]\r\ny [ 1 x ]\nz []\n")
    put("kaldi", "ranges", bytes([1 | 2 | 4 | (2 << 3) | (3 << 4)]) + ark)
    put("kaldi", "ranges-text", bytes([1 | 4 | (1 << 4)]) + txt)
    put("kaldi", "threads-f16", bytes([0x80 | 2]) + ark + txt)
    put("kaldi", "cut", b"\0" + ark[:-5])


def main():
    kaldi_seeds()
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
    # Label-sequence transcripts (bit 15 of the prefix: sequence_decode; bit
    # 14: per frame, then the sequence of its runs).
    seq = struct.pack("<H", 3 | 0x8000)
    put("transcript", "seq-framed", seq + npy(np.array(["[SOS]", "AA", "B", "AA", "[EOS]"])))
    put("transcript", "seq-bare", seq + npy(np.array(["B", "AA", "[SIL]"])))
    put("transcript", "seq-i8", seq + npy(np.array([40, 1, 7, 41], dtype=np.int64)))
    put("transcript", "seq-sos-only", seq + npy(np.array(["[SOS]", "AA", "B"])))
    put("transcript", "seq-empty", seq + npy(np.array(["[SOS]", "[EOS]"])))
    put("transcript", "runs", struct.pack("<H", 3 | 0x4000) + npy(t))
    shard = open(os.path.join(GOLDEN, "shard-000000.cxs"), "rb").read()
    manifest = open(os.path.join(GOLDEN, "manifest.cxs"), "rb").read()
    put("shard", "tiny", shard)
    put("shard", "truncated", shard[:4096 + 64])
    put("manifest", "tiny", struct.pack("<I", len(manifest)) + manifest + shard)
    # Label sequences (format 1.2): SEQUENCES and SEQ_META.
    for name in ("tiny-seq", "tiny-seq-only"):
        d = os.path.join(HERE, "..", "golden", "valid", name)
        sq = open(os.path.join(d, "shard-000000.cxs"), "rb").read()
        mq = open(os.path.join(d, "manifest.cxs"), "rb").read()
        put("shard", name, sq)
        put("manifest", name, struct.pack("<I", len(mq)) + mq + sq)
    zshard_seeds()


if __name__ == "__main__":
    main()
