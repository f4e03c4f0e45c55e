"""An independent writer and reader of Kaldi's binary archive objects, in
numpy, from Kaldi's documented algorithm (src/matrix/compressed-matrix.cc
and .h: CompressedMatrix::CopyFromMat, ComputeGlobalHeader,
ComputeColHeader, FloatToUint16, FloatToChar, CopyToMat, Uint16ToFloat,
CharToFloat; src/matrix/kaldi-matrix.cc: Matrix::Write/Read in binary;
src/base/io-funcs.cc: tokens and basic types).  It shares no code with the
importer (lib/import/kaldi.c): the tests compare what the importer stores with
what this module decodes from the same bytes.

Every float operation is done in the type Kaldi does it in: np.float32 for
Kaldi's floats, np.float64 where a double constant enters the expression
(1/64.0, 1/128.0, 1/63.0, 1.0/65535.0, 0.499, 0.5), then back to float32
where Kaldi assigns to a float."""
import struct

import numpy as np

F, D = np.float32, np.float64
U16_STEP = F(1.52590218966964e-05)  # Kaldi's float constant for 1/65535


# -- the global header --------------------------------------------------------

def global_header(m):
    """(min_value, range) as ComputeGlobalHeader computes them for the
    kSpeechFeature, kTwoByteAuto and kOneByteAuto methods."""
    m = np.asarray(m, dtype=F).ravel()
    # MatrixBase::Min and Max scan row by row and replace only on a strict
    # comparison: the first of the extremes in row-major order (which of
    # -0 and +0 is stored)
    lo, hi = m[np.argmax(m == m.min())], m[np.argmax(m == m.max())]
    if hi == lo:
        hi = F(D(lo) + (1.0 + abs(D(lo))))
    return lo, F(hi - lo)


def float_to_u16(mn, rng, v):
    f = (F(v) - mn) / rng  # float
    f = np.clip(f, F(0), F(1))
    return np.trunc(D(F(f * F(65535))) + 0.499).astype(np.int64)


def float_to_u8(mn, rng, v):
    f = (F(v) - mn) / rng
    f = np.clip(f, F(0), F(1))
    return np.trunc(D(F(f * F(255))) + 0.499).astype(np.int64)


def u16_to_float(mn, rng, v):
    return F(mn + F(F(rng * U16_STEP) * F(v)))


# -- CM: per-column percentiles ------------------------------------------------

def col_header(mn, rng, col):
    """ComputeColHeader: four uint16 percentiles of one column."""
    s = np.sort(np.asarray(col, dtype=F))
    n = len(s)
    u = lambda x: int(float_to_u16(mn, rng, x))  # noqa: E731
    if n >= 5:
        q = n // 4
        p0 = min(u(s[0]), 65532)
        p25 = min(max(u(s[q]), p0 + 1), 65533)
        p75 = min(max(u(s[3 * q]), p25 + 1), 65534)
        p100 = max(u(s[n - 1]), p75 + 1)
    else:
        p0 = min(u(s[0]), 65532)
        p25 = min(max(u(s[1]), p0 + 1), 65533) if n > 1 else p0 + 1
        p75 = min(max(u(s[2]), p25 + 1), 65534) if n > 2 else p25 + 1
        p100 = max(u(s[3]), p75 + 1) if n > 3 else p75 + 1
    return p0, p25, p75, p100


def _int(x):
    """static_cast<int>(double) as x86-64 does it (cvttsd2si): truncation,
    and INT_MIN where the result does not fit or x is NaN (undefined in
    C++; x86-64 is where Kaldi's archives are written)."""
    x = np.asarray(x, dtype=D)
    with np.errstate(invalid="ignore"):
        ok = (x > -2147483649.0) & (x < 2147483648.0)
    return np.where(ok, np.trunc(np.where(ok, x, 0.0)), -2147483648.0)


def float_to_char(p0, p25, p75, p100, v):
    """FloatToChar, vectorised over a column v (float32).  A quotient is
    infinite or NaN where two percentiles decode to the same float."""
    v = np.asarray(v, dtype=F)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lo = np.clip(_int(D(F(((v - p0) / (p25 - p0)) * F(64))) + 0.5), 0, 64)
        mid = np.clip(64 + _int(D(F(((v - p25) / (p75 - p25)) * F(128))) + 0.5), 64, 192)
        hi = np.clip(192 + _int(D(F(((v - p75) / (p100 - p75)) * F(63))) + 0.5), 192, 255)
    with np.errstate(invalid="ignore"):
        out = np.where(v < p25, lo, np.where(v < p75, mid, hi))
    return out.astype(np.uint8)


def char_to_float(p0, p25, p75, p100, b):
    """CharToFloat, vectorised over bytes b."""
    b = np.asarray(b, dtype=np.int64)
    r0 = F(D(p0) + D(F((p25 - p0) * F(b))) * (1 / 64.0))
    r1 = F(D(p25) + D(F((p75 - p25) * F(b - 64))) * (1 / 128.0))
    r2 = F(D(p75) + D(F((p100 - p75) * F(b - 192))) * (1 / 63.0))
    return np.where(b <= 64, r0, np.where(b <= 192, r1, r2)).astype(F)


# -- objects ---------------------------------------------------------------------

def _i32(v):
    return b"\x04" + struct.pack("<i", v)


def encode(m, kind):
    """The binary object ("\\0B" included) of matrix m as Kaldi writes it:
    kind FM, DM, FV, DV (m 1-D), CM (kSpeechFeature), CM2 (kTwoByteAuto)
    or CM3 (kOneByteAuto)."""
    if kind in ("FV", "DV"):
        v = np.asarray(m, dtype=F if kind == "FV" else D)
        return b"\0B" + kind.encode() + b" " + _i32(len(v)) + v.astype(v.dtype.newbyteorder("<")).tobytes()
    if kind in ("FM", "DM"):
        a = np.asarray(m, dtype=F if kind == "FM" else D)
        R, C = a.shape
        return (b"\0B" + kind.encode() + b" " + _i32(R) + _i32(C) +
                np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())
    a = np.asarray(m, dtype=F)
    R, C = a.shape
    mn, rng = global_header(a)
    head = struct.pack("<ffii", mn, rng, R, C)
    if kind == "CM2":
        q = float_to_u16(mn, rng, a).astype("<u2")
        return b"\0BCM2 " + head + q.tobytes()
    if kind == "CM3":
        q = float_to_u8(mn, rng, a).astype(np.uint8)
        return b"\0BCM3 " + head + q.tobytes()
    assert kind == "CM"
    heads, cols = [], []
    for c in range(C):
        ph = col_header(mn, rng, a[:, c])
        heads.append(struct.pack("<HHHH", *ph))
        p = [u16_to_float(mn, rng, x) for x in ph]
        cols.append(float_to_char(*p, a[:, c]).tobytes())
    return b"\0BCM " + head + b"".join(heads) + b"".join(cols)


def cm_object(mn, rng, col_headers, bytes_by_col):
    """A CM object from its parts as they are (for hand-made values)."""
    R = len(bytes_by_col[0])
    C = len(col_headers)
    return (b"\0BCM " + struct.pack("<ffii", mn, rng, R, C) +
            b"".join(struct.pack("<HHHH", *h) for h in col_headers) +
            b"".join(bytes(b) for b in bytes_by_col))


def decode(obj):
    """(kind, the matrix Kaldi's Matrix<float>::Read gives: float32 [R, C];
    float64 for DM and DV, which Kaldi reads into a Matrix<double>)."""
    assert obj[:2] == b"\0B", obj[:8]
    sp = obj.index(b" ", 2)
    kind = obj[2:sp].decode()
    p = sp + 1
    if kind in ("FV", "DV"):
        assert obj[p] == 4
        n, = struct.unpack_from("<i", obj, p + 1)
        dt = "<f4" if kind == "FV" else "<f8"
        return kind, np.frombuffer(obj, dt, n, p + 5).reshape(n, 1)
    if kind in ("FM", "DM"):
        R, = struct.unpack_from("<i", obj, p + 1)
        C, = struct.unpack_from("<i", obj, p + 6)
        dt = "<f4" if kind == "FM" else "<f8"
        return kind, np.frombuffer(obj, dt, R * C, p + 10).reshape(R, C)
    mn, rng, R, C = struct.unpack_from("<ffii", obj, p)
    mn, rng = F(mn), F(rng)
    p += 16
    if kind == "CM2":
        inc = F(D(rng) * (1.0 / 65535.0))
        q = np.frombuffer(obj, "<u2", R * C, p).reshape(R, C)
        return kind, F(mn + F(F(q) * inc))
    if kind == "CM3":
        inc = F(D(rng) * (1.0 / 255.0))
        q = np.frombuffer(obj, np.uint8, R * C, p).reshape(R, C)
        return kind, F(mn + F(F(q) * inc))
    assert kind == "CM", kind
    heads = np.frombuffer(obj, "<u2", 4 * C, p).reshape(C, 4)
    data = np.frombuffer(obj, np.uint8, R * C, p + 8 * C).reshape(C, R)
    out = np.empty((R, C), F)
    for c in range(C):
        pp = [u16_to_float(mn, rng, int(x)) for x in heads[c]]
        out[:, c] = char_to_float(*pp, data[c])
    return kind, out


def write_ark(path, items):
    """items: [(key, object bytes)].  Returns {key: offset of the object}
    (what a scp line names)."""
    offs = {}
    with open(path, "wb") as f:
        for key, obj in items:
            f.write(key.encode() + b" ")
            offs[key] = f.tell()
            f.write(obj)
    return offs


def write_scp(path, lines):
    """lines: [(key, ark path, offset)] in the order given."""
    with open(path, "w") as f:
        for key, ark, off in lines:
            f.write(f"{key} {ark}:{off}\n")


# -- the text form (ark,t) -------------------------------------------------------

def encode_text(m, fmt="{:g}", eol="\n"):
    """A matrix in Kaldi's text form as Matrix::Write writes it with
    binary=false (src/matrix/kaldi-matrix.cc: " [", then each row as "\\n  "
    and every value followed by a space, then "]\\n"); fmt formats a value
    ("{:g}" is the six significant digits of a C++ stream's default).
    Returns (the bytes, the float32 matrix Kaldi reads back from them: each
    token rounded once to float, as its stream's float reader does)."""
    a = np.asarray(m, dtype=F)
    R, C = a.shape
    toks = [[fmt.format(float(x)) for x in row] for row in a]
    s = " ["
    for row in toks:
        s += eol + "  " + "".join(t + " " for t in row)
    s += "]" + eol
    back = np.array([[text_float(t) for t in row] for row in toks], dtype=F).reshape(R, C)
    return s.encode(), back


def text_float(tok):
    """A decimal token rounded once to the nearest float32 (exactly, with
    fractions: no rounding through a double first)."""
    from fractions import Fraction
    q = Fraction(tok)
    if q == 0:
        return F(0.0) if not tok.startswith("-") else F(-0.0)
    # the two float32 neighbours of the double nearest q, then the nearer to q
    f = F(float(q))
    lo, hi = (f, np.nextafter(f, F(np.inf))) if Fraction(float(f)) <= q else \
             (np.nextafter(f, F(-np.inf)), f)
    dl, dh = q - Fraction(float(lo)), Fraction(float(hi)) - q
    if dl < dh:
        return lo
    if dh < dl:
        return hi
    return lo if (lo.view(np.uint32) & 1) == 0 else hi  # a tie: to even
