"""Regenerate the golden test vectors (tests/golden/) and print the hex dump
used in spec/format.md's appendix.  Run from the repository root:

    /usr/bin/python3 tests/golden/make_golden.py build/tools/ctxshard

valid/tiny is the packed form of a two-utterance dataset with known values;
valid/tiny-zstd and valid/tiny-zstd-noshuffle are it compressed (with and
without the byte-shuffle filter); valid/tiny-f16 is a features-only
dataset stored as float16 with guard 2; valid/tiny-seq is tiny with label
sequences besides its frame labels (--transcripts both, format 1.2) and
valid/tiny-seq-only the same features with label sequences only
(--transcripts sequence).  invalid/ holds one damaged copy of tiny (or of
tiny-seq-only, the seq-* cases) per rule, listed in invalid/EXPECTED with the step that must refuse it
(open or verify) and the error code.  The compressed bytes depend on the
zstd version; the decoded values do not.

Those vectors are written with --block-sums off: they are the bytes of the
format 1.0-1.2 writers (a 1.3 reader reads them unchanged).  Format 1.3's
block sums have their own: valid/tiny-sums is tiny as the packer writes it
by default (a BLOCKSUMS section, one block per section), valid/sums-blocks
three longer utterances whose FEATURES and LABELS span two blocks each,
and invalid/sums-* damaged copies of it; valid/tiny-sums-required is
tiny-sums with BLOCKSUMS's required bit set.  Format 1.4: valid/tiny-q8 and
tiny-q16 are a two-utterance features-only dataset coded (3 and 6 rows, 2
features), tiny-q8-zstd and tiny-q16-zstd them compressed, and
invalid/q8-* damaged copies of tiny-q8 (q8-qheaders-stale-sum of it packed
with block sums).  invalid/zfeatures-stale is
tiny-zstd-noshuffle with a non-zero guard row in chunk 0 under a good
chunk checksum and a stale ZFEATURES section checksum.  EXPECTED's
optional fourth column is a text the reference reader's message must hold
(underscores for spaces); spec/format.md's Appendix A describes the file."""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import ctypes

import numpy as np

_XXH = ctypes.CDLL("libxxhash.so.0")
_XXH.XXH3_64bits.restype = ctypes.c_uint64
_XXH.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3(b):
    b = bytes(b)
    return _XXH.XXH3_64bits(b, len(b))

HERE = os.path.dirname(os.path.abspath(__file__))
EXE = sys.argv[1]
VOCAB = ["[SIL]", "AA", "B", "[SOS]", "[EOS]"]
OFF = ["--block-sums", "off"]  # the vectors of format 1.0-1.2


def raw_tiny(root):
    os.makedirs(os.path.join(root, "mfcc"))
    os.makedirs(os.path.join(root, "transcript"))
    a = np.arange(1, 7, dtype=np.float32).reshape(3, 2)        # 1..6
    b = np.arange(10, 14, dtype=np.float32).reshape(2, 2)      # 10..13
    np.save(os.path.join(root, "mfcc", "a.npy"), a)
    np.save(os.path.join(root, "mfcc", "b.npy"), b)
    np.save(os.path.join(root, "transcript", "a.npy"), np.array(["[SOS]", "AA", "B", "[SIL]", "[EOS]"]))
    np.save(os.path.join(root, "transcript", "b.npy"), np.array(["[SOS]", "B", "B", "[EOS]"]))
    with open(os.path.join(root, "vocab.txt"), "w") as f:
        f.write("\n".join(VOCAB) + "\n")


def raw_f16(root):
    """Features only (no transcript/): a test split.  b's values exercise
    float16 rounding (0.1), a subnormal (1e-5) and a large value."""
    os.makedirs(os.path.join(root, "mfcc"))
    a = np.arange(1, 7, dtype=np.float32).reshape(3, 2)
    b = np.array([[0.1, -0.5], [1e-5, 1000]], dtype=np.float32)
    np.save(os.path.join(root, "mfcc", "a.npy"), a)
    np.save(os.path.join(root, "mfcc", "b.npy"), b)


def raw_seq(root):
    """tiny's features with label-sequence transcripts (HW3P2): a's framed
    by [SOS] .. [EOS], b's bare and longer than b (4 symbols, 2 frames)."""
    raw_tiny(root)
    np.save(os.path.join(root, "transcript", "a.npy"), np.array(["[SOS]", "AA", "B", "[EOS]"]))
    np.save(os.path.join(root, "transcript", "b.npy"), np.array(["B", "AA", "B", "[SIL]"]))


def raw_blocks(root):
    """Three utterances of 4 dimensions, 3000, 2500 and 1000 frames: with
    guard 1, FEATURES is 104,064 bytes (blocks of 65,536 and 38,528) and
    LABELS 6,500 (4,096 and 2,404).  Value (u, t, d) = ((7t + 3d + 11u) %
    97) / 4, exact in float32; the label of frame t is symbol (t + u) % 3."""
    raw_tiny(root)
    for f in os.listdir(os.path.join(root, "mfcc")):
        os.remove(os.path.join(root, "mfcc", f))
        os.remove(os.path.join(root, "transcript", f))
    for u, T in enumerate((3000, 2500, 1000)):
        t = np.arange(T)[:, None]
        x = ((7 * t + 3 * np.arange(4)[None, :] + 11 * u) % 97) / 4.0
        np.save(os.path.join(root, "mfcc", f"u{u + 1}.npy"), x.astype(np.float32))
        tr = ["[SOS]"] + [VOCAB[(i + u) % 3] for i in range(T)] + ["[EOS]"]
        np.save(os.path.join(root, "transcript", f"u{u + 1}.npy"), np.array(tr))


# Format 1.4's coded vectors: two utterances of 2 features, one of 3 rows
# (Kaldi's pathological path for fewer than 5 rows), one of 6.
CODED_A = [[1, 2], [3, 4], [5, 6]]
CODED_B = [[0.5, -1], [2, 3.25], [-0.75, 0], [1, 1], [4, -2], [0, 0.125]]


def raw_coded(root):
    os.makedirs(os.path.join(root, "mfcc"))
    np.save(os.path.join(root, "mfcc", "a.npy"), np.array(CODED_A, dtype=np.float32))
    np.save(os.path.join(root, "mfcc", "b.npy"), np.array(CODED_B, dtype=np.float32))


def coded(exp):
    """valid/tiny-q8, tiny-q16 (features only, --block-sums off) and their
    zstd copies; invalid/q8-* damaged copies of tiny-q8 appended to
    EXPECTED."""
    shard = "shard-000000.cxs"
    for dtype in ("q8", "q16"):
        dst = os.path.join(HERE, "valid", f"tiny-{dtype}")
        shutil.rmtree(dst, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            raw_coded(tmp)
            subprocess.run([EXE, "pack", tmp, dst, "--dtype", dtype, "--threads", "1",
                            "--quiet", *OFF], check=True)
        z = os.path.join(HERE, "valid", f"tiny-{dtype}-zstd")
        shutil.rmtree(z, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            raw_coded(tmp)
            subprocess.run([EXE, "pack", tmp, z, "--dtype", dtype, "--compress", "zstd:3",
                            "--chunk-size", "8", "--threads", "1", "--quiet", *OFF], check=True)
    q8 = os.path.join(HERE, "valid", "tiny-q8")
    _, ss = sections(os.path.join(q8, shard))
    _, ms = sections(os.path.join(q8, "manifest.cxs"))
    q0, ql, qt = ss[10]
    H = 8 + 8 * 2
    cases = [
        # QHEADERS one byte short of U*H, every checksum good
        ("q8-qheaders-length", shard, setu64(qt + 16, ql - 1), "open", "CXS_E_CORRUPT",
         "QHEADERS"),
        # utterance 1's range -1.0: verify names it
        ("q8-bad-header", shard, setu32(q0 + H + 4, 0xbf800000), "verify", "CXS_E_CORRUPT",
         "QHEADERS:_utterance_1"),
        # utterance 0, column 1: p25 > p75
        ("q8-bad-percentiles", shard, setu32(q0 + 8 + 8 + 2, 0xffff), "verify", "CXS_E_CORRUPT",
         "column_1"),
        # guard 1 with a coded dtype (DATASET_META's guard, offset 24)
        ("q8-guard", "manifest.cxs", setu32(ms[16][0] + 24, 1), "open", "CXS_E_CORRUPT",
         "guard"),
    ]
    for name, fname, edit, step, code, text in cases:
        damaged(name, q8, fname, edit)
        rehash(os.path.join(HERE, "invalid", name))
        exp.write(f"{name} {step} {code} {text}\n")
    # A faulty writer's file: utterance 0's min changed (still a valid
    # header), every section checksum made good, QHEADERS's block sum left
    # stale.  Open checks the blocks of the sections it checks whole
    # (spec 4.8, 8 step 8): the block sum wins.
    with tempfile.TemporaryDirectory() as tmp:
        raw_coded(tmp)
        sums = os.path.join(tmp, "q8-sums")
        subprocess.run([EXE, "pack", tmp, sums, "--dtype", "q8", "--threads", "1", "--quiet"],
                       check=True)
        damaged("q8-qheaders-stale-sum", sums, shard, flip(sections(os.path.join(
            sums, shard))[1][10][0]))
    rehash(os.path.join(HERE, "invalid", "q8-qheaders-stale-sum"))
    exp.write("q8-qheaders-stale-sum open CXS_E_CHECKSUM QHEADERS_block_0_of_1\n")


def rehash(d, keep=()):
    """Recompute every checksum of a damaged dataset directory, as a faulty
    writer would: each shard's sections (but those of the types in `keep`,
    left as they were) and header, the manifest's SHARD_TABLE header
    checksums, sections and header.  What refuses it is then the rule the
    damage breaks, not a checksum."""
    def fix(data):
        n = struct.unpack_from("<I", data, 24)[0]
        for i in range(n):
            t, fl, off, ln, ck = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
            if t not in keep:
                struct.pack_into("<Q", data, 64 + 32 * i + 24, xxh3(data[off:off + ln]))
        struct.pack_into("<Q", data, 56, 0)
        struct.pack_into("<Q", data, 56, xxh3(data[:64 + 32 * n]))
        return struct.unpack_from("<Q", data, 56)[0]
    heads = []
    i = 0
    while os.path.exists(os.path.join(d, f"shard-{i:06d}.cxs")):
        p = os.path.join(d, f"shard-{i:06d}.cxs")
        data = bytearray(open(p, "rb").read())
        heads.append(fix(data))
        open(p, "wb").write(bytes(data))
        i += 1
    p = os.path.join(d, "manifest.cxs")
    data = bytearray(open(p, "rb").read())
    _, secs = sections(p)
    off = secs[17][0]
    for j, h in enumerate(heads):
        struct.pack_into("<Q", data, off + 64 * j + 8, h)
    fix(data)
    open(p, "wb").write(bytes(data))


def sections(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<I", data, 24)[0]
    out = {}
    for i in range(n):
        t, fl, off, ln, ck = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
        out[t] = (off, ln, 64 + 32 * i)
    return data, out


def raw_frame(content):
    """A zstd frame (RFC 8878) holding `content` in one Raw_Block, with its
    content size and nothing else: what any zstd decodes to exactly those
    bytes, whatever its version."""
    n = len(content)
    assert n < 256  # a one-byte Frame_Content_Size (Single_Segment, FCS flag 0)
    return (b"\x28\xb5\x2f\xfd" + bytes([0x20, n]) +
            (1 | 0 << 1 | n << 3).to_bytes(3, "little") + bytes(content))


def guard_in_chunk0(raw_rows):
    """Chunk 0 of a compressed shard (filter 0) replaced by a raw zstd frame
    of its rows with the leading guard row's first byte set to 1, the chunk
    table's ends and chunk 0's checksum made to match (CHUNKS's section
    checksum is made good by rehash); ZFEATURES's length follows, its section
    checksum is not touched."""
    def e(d):
        data, secs = bytes(d), {}
        n = struct.unpack_from("<I", data, 24)[0]
        for i in range(n):
            t, fl, off, ln, ck = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
            secs[t] = (off, ln, 64 + 32 * i)
        z0, zl, zt = secs[6]
        c0 = secs[7][0]
        nch = struct.unpack_from("<Q", data, c0 + 24)[0]
        ends = [struct.unpack_from("<Q", data, c0 + 64 + 16 * c)[0] for c in range(nch)]
        rows = bytearray(raw_rows)
        rows[0] = 1
        new0 = raw_frame(rows)
        z = new0 + data[z0 + ends[0]:z0 + zl]
        assert z0 + len(z) <= secs[7][0]  # the section stays in its pages
        d[z0:z0 + max(zl, len(z))] = z + bytes(max(zl, len(z)) - len(z))
        struct.pack_into("<Q", d, zt + 16, len(z))
        delta = len(new0) - ends[0]
        for c in range(nch):
            struct.pack_into("<Q", d, c0 + 64 + 16 * c, ends[c] + delta)
        struct.pack_into("<Q", d, c0 + 64 + 8, xxh3(new0))
        return d
    return e


def damaged(name, src_dir, fname, edit):
    dst = os.path.join(HERE, "invalid", name)
    shutil.copytree(src_dir, dst)
    p = os.path.join(dst, fname)
    data = bytearray(open(p, "rb").read())
    data = edit(data)
    open(p, "wb").write(bytes(data))


def flip(pos):
    def e(d):
        d[pos] ^= 0x01
        return d
    return e


def main():
    tiny = os.path.join(HERE, "valid", "tiny")
    shutil.rmtree(tiny, ignore_errors=True)
    shutil.rmtree(os.path.join(HERE, "invalid"), ignore_errors=True)
    os.makedirs(os.path.join(HERE, "invalid"))
    with tempfile.TemporaryDirectory() as tmp:
        raw_tiny(tmp)
        subprocess.run([EXE, "pack", tmp, tiny, "--guard", "1", "--vocab",
                        os.path.join(tmp, "vocab.txt"), "--threads", "1", "--quiet",
                        *OFF], check=True)
    for name, args in [("tiny-zstd", ["--chunk-size", "24"]),
                       ("tiny-zstd-noshuffle", ["--chunk-size", "40", "--no-shuffle"])]:
        dst = os.path.join(HERE, "valid", name)
        shutil.rmtree(dst, ignore_errors=True)
        subprocess.run([EXE, "convert", tiny, dst, "--compress", "zstd:3", *args,
                        "--threads", "1", "--quiet", *OFF], check=True)
    seq = os.path.join(HERE, "valid", "tiny-seq")
    seq_only = os.path.join(HERE, "valid", "tiny-seq-only")
    for dst, make, mode in [(seq, raw_tiny, "both"), (seq_only, raw_seq, "sequence")]:
        shutil.rmtree(dst, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            make(tmp)
            subprocess.run([EXE, "pack", tmp, dst, "--guard", "1", "--vocab",
                            os.path.join(tmp, "vocab.txt"), "--transcripts", mode,
                            "--threads", "1", "--quiet", *OFF], check=True)
    f16 = os.path.join(HERE, "valid", "tiny-f16")
    shutil.rmtree(f16, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw_f16(tmp)
        subprocess.run([EXE, "pack", tmp, f16, "--guard", "2", "--dtype", "f16",
                        "--threads", "1", "--quiet", *OFF], check=True)
    shard = "shard-000000.cxs"
    sd, ss = sections(os.path.join(tiny, shard))
    md, ms = sections(os.path.join(tiny, "manifest.cxs"))
    cases = [
        ("bad-magic", shard, flip(0), "open", "CXS_E_BAD_MAGIC"),
        ("header-flip", shard, flip(20), "open", "CXS_E_CHECKSUM"),
        ("table-flip", shard, flip(64 + 8), "open", "CXS_E_CHECKSUM"),
        ("truncated-shard", shard, lambda d: d[:len(d) - 4096], "open", "CXS_E_TRUNCATED"),
        ("truncated-header", shard, lambda d: d[:100], "open", "CXS_E_TRUNCATED"),
        ("meta-flip", shard, flip(ss[1][0] + 4), "open", "CXS_E_CHECKSUM"),
        ("index-flip", shard, flip(ss[2][0] + 8), "open", "CXS_E_CHECKSUM"),
        ("ids-flip", shard, flip(ss[3][0] + ss[3][1] - 1), "open", "CXS_E_CHECKSUM"),
        ("features-flip", shard, flip(ss[4][0] + 8 + 2), "verify", "CXS_E_CHECKSUM"),
        ("guard-flip", shard, flip(ss[4][0] + 1), "verify", "CXS_E_CORRUPT"),
        ("labels-flip", shard, flip(ss[5][0]), "verify", "CXS_E_CHECKSUM"),
        # a label outside the vocabulary (5 symbols): the values before the checksum
        ("labels-vocab", shard, setbyte(ss[5][0] + 3, 9), "verify", "CXS_E_CORRUPT"),
        ("padding-flip", shard, flip(ss[5][0] + ss[5][1] + 3), "verify", "CXS_E_CORRUPT"),
        ("manifest-meta-flip", "manifest.cxs", flip(ms[16][0] + 20), "open", "CXS_E_CHECKSUM"),
        ("manifest-table-flip", "manifest.cxs", flip(ms[17][0] + 8), "open", "CXS_E_CHECKSUM"),
        ("manifest-vocab-flip", "manifest.cxs", flip(ms[18][0] + ms[18][1] - 1), "open", "CXS_E_CHECKSUM"),
        ("manifest-stats-flip", "manifest.cxs", flip(ms[19][0] + 40), "open", "CXS_E_CHECKSUM"),
        ("future-major", "manifest.cxs", bump_major, "open", "CXS_E_VERSION"),
    ]
    with open(os.path.join(HERE, "invalid", "EXPECTED"), "w") as exp:
        exp.write("# case  step-that-must-refuse  error-code\n")
        for name, fname, edit, step, code in cases:
            damaged(name, tiny, fname, edit)
            exp.write(f"{name} {step} {code}\n")
        # Label sequences (format 1.2): damaged copies of tiny-seq-only.
        qd, qs = sections(os.path.join(seq_only, shard))
        _, qm = sections(os.path.join(seq_only, "manifest.cxs"))
        q0, ql = qs[8][0], qs[8][1]  # SEQUENCES: 3 offsets, then 6 symbols
        sym0 = q0 + 24
        seq_cases = [
            ("seq-flip", shard, flip(sym0), "open", "CXS_E_CHECKSUM", False),
            ("seq-meta-flip", "manifest.cxs", flip(qm[21][0] + 8), "open", "CXS_E_CHECKSUM",
             False),
            ("seq-symbol", shard, setbyte(sym0 + 1, 5), "open", "CXS_E_CORRUPT", True),
            ("seq-empty", shard, setu64(q0 + 8, 0), "open", "CXS_E_CORRUPT", True),
            ("seq-length", shard, setu64(q0 + 16, 7), "open", "CXS_E_CORRUPT", True),
            ("seq-meta-count", "manifest.cxs", setu64(qm[21][0] + 8, 7), "open",
             "CXS_E_CORRUPT", True),
            ("seq-frame-labels", "manifest.cxs", setu64(qm[21][0], 1), "open", "CXS_E_CORRUPT",
             True),
            ("seq-padding-flip", shard, flip(q0 + ql + 3), "verify", "CXS_E_CORRUPT", False),
        ]
        for name, fname, edit, step, code, fix in seq_cases:
            damaged(name, seq_only, fname, edit)
            if fix:
                rehash(os.path.join(HERE, "invalid", name))
            exp.write(f"{name} {step} {code}\n")
        # Ids out of order ("ab" stored as "ba"), every checksum made good.
        i0 = ss[3][0] + 24  # IDS: 3 offsets, then the bytes of a and b

        def swap_ids(d):
            d[i0], d[i0 + 1] = d[i0 + 1], d[i0]
            return d
        damaged("ids-order", tiny, shard, swap_ids)
        rehash(os.path.join(HERE, "invalid", "ids-order"))
        exp.write("ids-order open CXS_E_CORRUPT\n")
        # Compressed (filter 0, 5 rows a chunk): chunk 0 holds a non-zero
        # guard row under a checksum of its own that matches, but ZFEATURES's
        # section checksum is stale.  verify's step 1 (spec 4.6) refuses it.
        zns = os.path.join(HERE, "valid", "tiny-zstd-noshuffle")
        feat = sd[ss[4][0]:ss[4][0] + ss[4][1]]
        damaged("zfeatures-stale", zns, shard, guard_in_chunk0(feat[:40]))
        rehash(os.path.join(HERE, "invalid", "zfeatures-stale"), keep=(6,))
        exp.write("zfeatures-stale verify CXS_E_CHECKSUM ZFEATURES\n")
        # A shard the manifest lists is missing.
        shutil.copytree(tiny, os.path.join(HERE, "invalid", "missing-shard"))
        os.remove(os.path.join(HERE, "invalid", "missing-shard", shard))
        exp.write("missing-shard open ENOENT\n")
        # Format 1.3: block sums.
        tsum = os.path.join(HERE, "valid", "tiny-sums")
        blk = os.path.join(HERE, "valid", "sums-blocks")
        for dst, make in [(tsum, raw_tiny), (blk, raw_blocks)]:
            shutil.rmtree(dst, ignore_errors=True)
            with tempfile.TemporaryDirectory() as tmp:
                make(tmp)
                subprocess.run([EXE, "pack", tmp, dst, "--guard", "1", "--vocab",
                                os.path.join(tmp, "vocab.txt"), "--threads", "1", "--quiet"],
                               check=True)
        # BLOCKSUMS with its required bit set (flags 1), rehashed: valid for a
        # reader that knows type 9 (the bit speaks only to readers that do
        # not, which must refuse it, spec 3.2).
        treq = os.path.join(HERE, "valid", "tiny-sums-required")
        shutil.rmtree(treq, ignore_errors=True)
        shutil.copytree(tsum, treq)
        _, ts = sections(os.path.join(treq, shard))
        p = os.path.join(treq, shard)
        data = bytearray(open(p, "rb").read())
        struct.pack_into("<I", data, ts[9][2] + 4, 1)
        open(p, "wb").write(bytes(data))
        rehash(treq)
        _, bs = sections(os.path.join(blk, shard))
        b0, bl = bs[9][0], bs[9][1]  # BLOCKSUMS: head, 4 entries (INDEX, IDS, FEATURES, LABELS)
        ent = lambda i: b0 + 8 + 24 * i
        sums0 = b0 + 8 + 24 * 4  # INDEX's sum, IDS's, FEATURES's two, LABELS's two
        f0, l0 = bs[4][0], bs[5][0]
        sum_cases = [
            # a value of u2 (row 1 + 3000 + 1 + 1500, at byte 72,032: FEATURES block 1)
            ("sums-features-flip", flip(f0 + 16 * 4502 + 2), "verify", "CXS_E_CHECKSUM",
             False, "FEATURES_block_1_of_2"),
            # a label in LABELS block 1 (frame 5000, of u2), every checksum made good
            ("sums-labels-flip", setbyte(l0 + 5000, 1), "verify", "CXS_E_CHECKSUM", True,
             "LABELS_block_1_of_2"),
            # a label outside the vocabulary, nothing recomputed: its block first
            ("sums-labels-vocab", setbyte(l0 + 5000, 9), "verify", "CXS_E_CHECKSUM", False,
             "LABELS_block_1_of_2"),
            # a stored sum wrong, BLOCKSUMS's section checksum made good
            ("sums-wrong-sum", flip(sums0 + 8 * 2), "verify", "CXS_E_CHECKSUM", True,
             "FEATURES_block_0_of_2"),
            ("sums-flip", flip(sums0 + 3), "open", "CXS_E_CHECKSUM", False, "BLOCKSUMS"),
            ("sums-count", setu32(b0, 17), "open", "CXS_E_CORRUPT", True, None),
            ("sums-reserved", setu32(b0 + 4, 1), "open", "CXS_E_CORRUPT", True, None),
            ("sums-order", setu32(ent(1), 2), "open", "CXS_E_CORRUPT", True, None),
            ("sums-absent-type", setu32(ent(0), 7), "open", "CXS_E_CORRUPT", True, None),
            ("sums-shift", setu32(ent(2) + 4, 11), "open", "CXS_E_CORRUPT", True, None),
            ("sums-num-blocks", setu64(ent(2) + 8, 3), "open", "CXS_E_CORRUPT", True, None),
            ("sums-first", setu64(ent(3) + 16, 5), "open", "CXS_E_CORRUPT", True, None),
            # the section 8 bytes longer (zero padding taken in)
            ("sums-length", setu64(bs[9][2] + 16, bl + 8), "open", "CXS_E_CORRUPT", True, None),
        ]
        for name, edit, step, code, fix, text in sum_cases:
            damaged(name, blk, shard, edit)
            if fix:
                rehash(os.path.join(HERE, "invalid", name))
            exp.write(f"{name} {step} {code}" + (f" {text}" if text else "") + "\n")
        coded(exp)
    hexdump(tiny)
    hexdump(f16)
    hexdump(seq_only)
    blocksums(os.path.join(HERE, "valid", "tiny-sums", shard))
    chunks(os.path.join(HERE, "valid", "tiny-zstd-noshuffle", shard))
    for dtype in ("q8", "q16"):
        qsections(os.path.join(HERE, "valid", f"tiny-{dtype}", shard))


def chunks(path):
    """The CHUNKS head and entries of a compressed shard, for the appendix."""
    data, secs = sections(path)
    off, ln, _ = secs[7]
    codec, filt, raw, rows, level, n = struct.unpack_from("<IIQIiQ", data, off)
    ends = [struct.unpack_from("<QQ", data, off + 64 + 16 * c) for c in range(n)]
    print(f"CHUNKS of {path}: codec {codec} filter {filt} raw_length {raw} chunk_rows {rows} "
          f"level {level} num_chunks {n}; ends {[e for e, _ in ends]}")


def setbyte(pos, v):
    def e(d):
        d[pos] = v
        return d
    return e


def setu32(pos, v):
    def e(d):
        struct.pack_into("<I", d, pos, v)
        return d
    return e


def blocksums(path):
    """The BLOCKSUMS section of tiny-sums's shard, for the appendix."""
    data, secs = sections(path)
    off, ln, _ = secs[9]
    n = struct.unpack_from("<I", data, off)[0]
    print(f"BLOCKSUMS at {off:#x}, {ln} bytes: {n} entries")
    for i in range(n):
        t, sh, nb, first = struct.unpack_from("<IIQQ", data, off + 8 + 24 * i)
        print(f"  type {t} shift {sh} blocks {nb} first {first}")
    for j in range((ln - 8 - 24 * n) // 8):
        print(f"  sum {j}: {struct.unpack_from('<Q', data, off + 8 + 24 * n + 8 * j)[0]:016x}")


def setu64(pos, v):
    def e(d):
        struct.pack_into("<Q", d, pos, v)
        return d
    return e


def bump_major(d):
    """Major version 2: a reader checks the version before the header
    checksum (a future version may lay the header out differently)."""
    struct.pack_into("<H", d, 8, 2)
    return d


def hexdump(tiny):
    """The non-zero 16-byte lines of every file, for the spec's appendix."""
    for fname in sorted(os.listdir(tiny)):
        data = open(os.path.join(tiny, fname), "rb").read()
        print(f"{fname} ({len(data)} bytes)")
        for off in range(0, len(data), 16):
            line = data[off:off + 16]
            if any(line):
                hx = " ".join(f"{b:02x}" for b in line)
                asc = "".join(chr(b) if 32 <= b < 127 else "." for b in line)
                print(f"  {off:06x}  {hx:<47}  {asc}")
        print()


def qsections(path):
    """A coded shard's QHEADERS and FEATURES, for the spec's appendix."""
    data, secs = sections(path)
    for t, name in ((10, "QHEADERS"), (4, "FEATURES")):
        off, ln, _ = secs[t]
        print(f"{os.path.basename(os.path.dirname(path))} {name} at {off:#x}, {ln} bytes:")
        for o in range(0, ln, 16):
            print("  " + " ".join(f"{b:02x}" for b in data[off + o:off + min(o + 16, ln)]))
    print()


if __name__ == "__main__":
    main()
