"""The q8/q16 codec (format/cxs_qcodec.c, through tests/unit/qcodec_run)
against an independent reference written from Kaldi's source
(kaldi_ref.py): encoding gives the header and codes Kaldi's CopyFromMat
gives (kSpeechFeature for q8 at every row count, kTwoByteAuto for q16),
decoding the floats its CopyToMat gives, bit for bit, on random and
pathological matrices; headers that cannot come from the encoder are
refused.

usage: qcodec_test.py QCODEC_RUN"""
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kaldi_ref as K  # noqa: E402

RUN = sys.argv[1]
F = np.float32
E_INPUT, E_CORRUPT = -5009, -5004


def run(mode, dtype, payload):
    with tempfile.TemporaryDirectory() as t:
        i, o = os.path.join(t, "in"), os.path.join(t, "out")
        with open(i, "wb") as f:
            f.write(payload)
        args = [RUN, mode] + ([dtype] if dtype else []) + [i, o]
        subprocess.run(args, check=True)
        with open(o, "rb") as f:
            return f.read()


def ref_parts(m, dtype):
    """(header, codes) from the reference: Kaldi's object, its codes
    made row-major."""
    R, C = m.shape
    obj = K.encode(m, "CM" if dtype == "q8" else "CM2")
    body = obj[obj.index(b" ", 2) + 1:]
    if dtype == "q16":
        return body[:8], body[16:]
    head = body[:8] + body[16:16 + 8 * C]
    codes = np.frombuffer(body, np.uint8, R * C, 16 + 8 * C).reshape(C, R).T
    return head, codes.tobytes()


def cases(rng):
    """Matrices: random ones of every shape the pathologies need."""
    out = []
    for n in (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 31, 100, 1000):
        for d in (1, 3, 40):
            out.append(rng.standard_normal((n, d)).astype(F) * F(3) + F(-1))
    # fbank-like: a positive log spectrum with a slope over the columns
    for n in (50, 777):
        m = np.log1p(rng.gamma(2.0, 3.0, (n, 80))).astype(F) * F(4) + np.linspace(0, 10, 80, dtype=F)
        out.append(m.astype(F))
    # constant columns, constant matrices (zeros, -0, negative, huge)
    m = rng.standard_normal((20, 6)).astype(F)
    m[:, 2] = 1.5
    m[:, 4] = 0.0
    out.append(m)
    for c in (0.0, -0.0, -7.25, 3e37, -3e37, 1e-42):
        for n in (1, 4, 9):
            out.append(np.full((n, 3), c, F))
    # signed zeros mixed: which of them is the min matters to the header
    z = np.array([[0.0, -0.0, 1.0], [-0.0, 0.0, 2.0], [0.0, 0.0, -0.0], [-0.0, -0.0, 0.0],
                  [0.0, 3.0, -0.0]], F)
    out += [z, z[::-1].copy(), -z, np.abs(z)]
    # many ties: small integers
    for n in (5, 16, 200):
        out.append(rng.integers(-2, 3, (n, 5)).astype(F))
    # huge (but finite) ranges, denormals, a tiny spread on a large offset
    out.append(np.array([[-1e38, 1e38], [0.0, 1.0], [5e37, -5e37], [1.0, 2.0], [3.0, 4.0]], F))
    out.append((rng.standard_normal((30, 4)) * 1e-39).astype(F))
    out.append(np.array([[1e-45, 0.0], [-1e-45, 2e-45], [0.0, 0.0], [3e-45, -0.0], [1e-44, 1e-45]], F))
    out.append((F(1e6) + rng.standard_normal((40, 7)).astype(F) * F(1e-3)).astype(F))
    out.append((F(-3e4) + rng.standard_normal((25, 3)).astype(F) * F(1e-4)).astype(F))
    # constant columns on a large offset: their four percentile codes are
    # adjacent and decode to one float, FloatToChar divides by zero
    # (x86's conversion of the infinity or NaN decides the code; the
    # boundary variants below put values one float above it)
    for n in (3, 6, 40):
        m = np.empty((n, 4), F)
        m[:, 0] = F(1e6) + rng.integers(0, 17, n).astype(F) * F(0.0625)
        m[:, 1], m[:, 2], m[:, 3] = F(1e6 + 0.5), F(1e6 + 0.5625), F(1e6 + 1)
        out.append(m)
    return out


def boundary(m, rng):
    """m's values moved onto the decoded percentiles of its own header and
    one float either side: FloatToChar's comparisons at their edges."""
    R, C = m.shape
    head, _ = ref_parts(m, "q8")
    mn, rg = struct.unpack_from("<ff", head)
    out = m.copy()
    for c in range(C):
        ph = struct.unpack_from("<HHHH", head, 8 + 8 * c)
        p = np.array([K.u16_to_float(F(mn), F(rg), x) for x in ph], F)
        pick = rng.integers(0, 4, R)
        nudge = rng.integers(-1, 2, R)
        v = p[pick]
        v = np.where(nudge < 0, np.nextafter(v, F(-np.inf)), np.where(nudge > 0, np.nextafter(v, F(np.inf)), v))
        out[:, c] = v
    return out.astype(F)


def encode_all(ms, dtype):
    payload = b"".join(struct.pack("<II", *m.shape) + m.astype("<f4").tobytes() for m in ms)
    res = run("encode", dtype, payload)
    p, got = 0, []
    E = 1 if dtype == "q8" else 2
    for m in ms:
        R, C = m.shape
        rc, = struct.unpack_from("<i", res, p)
        p += 4
        if rc:
            got.append((rc, None, None))
            continue
        H = 8 + 8 * C if dtype == "q8" else 8
        got.append((0, res[p:p + H], res[p + H:p + H + R * C * E]))
        p += H + R * C * E
    assert p == len(res)
    return got


def test_encode(dtype, ms):
    refused = 0
    for i, (m, (rc, h, c)) in enumerate(zip(ms, encode_all(ms, dtype))):
        with np.errstate(over="ignore", invalid="ignore"):
            _, dec = K.decode(K.encode(m, "CM" if dtype == "q8" else "CM2"))
        if not np.isfinite(dec).all():
            # Kaldi would store it and decode infinity: the codec refuses
            assert rc == E_INPUT, (dtype, i, m.shape, rc)
            refused += 1
            continue
        assert rc == 0, (dtype, i, m.shape, rc)
        rh, rcodes = ref_parts(m, dtype)
        assert h == rh, (dtype, i, m.shape, h.hex(), rh.hex())
        assert c == rcodes, (dtype, i, m.shape)
    print(f"{dtype}: {len(ms) - refused} matrices encode to Kaldi's headers and codes, "
          f"{refused} that Kaldi would decode to infinity are refused")


def test_refused():
    bad = [np.array([[1.0, np.nan]], F), np.array([[np.inf, 0.0]], F), np.array([[-3e38], [3e38]], F),
           np.full((3, 2), 3e38, F)]
    for dtype in ("q8", "q16"):
        for m, (rc, _, _) in zip(bad, encode_all(bad, dtype)):
            assert rc == E_INPUT, (dtype, m, rc)
    print("NaN, infinity and ranges beyond float are refused")


def bits(a):
    return np.asarray(a, F).view(np.uint32)


def test_decode(dtype, ms, rng):
    """Decode the encoder's output and random headers and codes: the
    reference decodes Kaldi objects of the same bytes."""
    recs, objs, shapes = [], [], []
    for m in ms:
        R, C = m.shape
        h, c = ref_parts(m, dtype)
        recs.append((R, C, h, c))
    for _ in range(60):
        R, C = int(rng.integers(1, 40)), int(rng.integers(1, 9))
        mn = F(rng.standard_normal() * 10.0 ** rng.integers(-3, 6))
        rg = F(abs(rng.standard_normal()) * 10.0 ** rng.integers(-5, 6)) + F(1e-30)
        h = struct.pack("<ff", mn, rg)
        if dtype == "q8":
            for _c in range(C):
                h += struct.pack("<HHHH", *sorted(int(x) for x in rng.integers(0, 65536, 4)))
            c = rng.integers(0, 256, (R, C)).astype(np.uint8).tobytes()
        else:
            c = rng.integers(0, 65536, (R, C)).astype("<u2").tobytes()
        recs.append((R, C, h, c))
    payload = b"".join(struct.pack("<II", R, C) + h + c for R, C, h, c in recs)
    res = np.frombuffer(run("decode", dtype, payload), "<f4")
    p = 0
    for R, C, h, c in recs:
        if dtype == "q8":
            codes = np.frombuffer(c, np.uint8).reshape(R, C)
            obj = b"\0BCM " + h[:8] + struct.pack("<ii", R, C) + h[8:] + codes.T.tobytes()
        else:
            obj = b"\0BCM2 " + h + struct.pack("<ii", R, C) + c
        _, want = K.decode(obj)
        for k in range(2):
            got = res[p:p + R * C].reshape(R, C)
            assert (bits(got) == bits(want)).all(), (dtype, R, C, k, h[:8].hex())
            p += R * C
        objs.append(obj)
        shapes.append((R, C))
    assert p == len(res)
    print(f"{dtype}: {len(recs)} utterances decode to Kaldi's floats, scalar and by table")


def test_check(rng):
    good = struct.pack("<ff", -1.0, 2.0)
    cases = [  # (dtype, dim, header, expected)
        ("q16", 1, good, 0),
        ("q16", 1, struct.pack("<ff", float("nan"), 1.0), E_CORRUPT),
        ("q16", 1, struct.pack("<ff", 0.0, float("inf")), E_CORRUPT),
        ("q16", 1, struct.pack("<ff", 0.0, 0.0), E_CORRUPT),
        ("q16", 1, struct.pack("<ff", 0.0, -1.0), E_CORRUPT),
        ("q16", 1, struct.pack("<ff", 3e38, 3e38), E_CORRUPT),
        ("q8", 2, good + struct.pack("<8H", 0, 1, 2, 3, 10, 10, 10, 10), 0),
        ("q8", 2, good + struct.pack("<8H", 0, 1, 2, 3, 10, 9, 11, 12), E_CORRUPT),
        ("q8", 2, good + struct.pack("<8H", 0, 1, 2, 3, 10, 11, 13, 12), E_CORRUPT),
        ("q8", 1, struct.pack("<ff", 1.0, -2.0) + struct.pack("<4H", 0, 1, 2, 3), E_CORRUPT),
    ]
    for dtype, dim, h, want in cases:
        got, = struct.unpack("<i", run("check", dtype, struct.pack("<I", dim) + h))
        assert got == want, (dtype, h.hex(), got, want)
    print(f"{len(cases)} headers checked as the spec says")


def test_cm(ms):
    """The Kaldi CM layout in and out: the reference's object body."""
    recs = []
    for m in ms:
        h, c = ref_parts(m, "q8")
        recs.append((m.shape, h, c, K.encode(m, "CM")[5:]))
    payload = b"".join(struct.pack("<II", *s) + h + c for s, h, c, _ in recs)
    res = run("cm", None, payload)
    p = 0
    for (R, C), h, c, body in recs:
        assert res[p:p + len(body)] == body, (R, C)
        p += len(body)
        assert res[p:p + len(h) + R * C] == h + c
        p += len(h) + R * C
    print(f"{len(recs)} CM bodies written and read back")


def main():
    rng = np.random.default_rng(47)
    ms = cases(rng)
    ms += [boundary(m, rng) for m in ms if m.shape[0] >= 2 and np.ptp(m) > 0 and np.ptp(m) < 1e30]
    for dtype in ("q8", "q16"):
        test_encode(dtype, ms)
        test_decode(dtype, ms, rng)
    test_refused()
    test_check(rng)
    test_cm(ms)


if __name__ == "__main__":
    main()
