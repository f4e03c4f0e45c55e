"""Round trip: synth -> pack -> gather every frame at several k (including
k > guard and utterances shorter than k) for every stored dtype, compared
exactly with the numpy reference computed from the raw files."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
import reference  # noqa: E402

EXE = sys.argv[1]


def run(*args):
    subprocess.run([EXE, *map(str, args)], check=True, stdout=subprocess.DEVNULL)


def gather_all(out, k, tmp):
    x, y = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    run("gather", out, "--context", k, "--all", "--out", x, "--labels", y)
    return np.load(x), np.load(y)


def check(raw, out, tmp, dtype, normalize, ks):
    ids, utts = reference.dataset(raw, dtype, normalize)
    for k in ks:
        X, Y = gather_all(out, k, tmp)
        ref_x = np.concatenate([reference.windows(f, k) for f, _ in utts])
        ref_y = np.concatenate([l for _, l in utts])
        assert X.dtype == np.float32 and X.shape == ref_x.shape, (X.shape, ref_x.shape)
        bad = np.argwhere(X.view(np.uint32) != ref_x.view(np.uint32))
        assert bad.size == 0, f"{dtype} k={k}: {len(bad)} values differ, first at {bad[0]}"
        assert Y.dtype == np.int64 and np.array_equal(Y, ref_y), f"labels differ at k={k}"
    print(f"ok: {dtype} normalize={normalize} k={ks}, {len(ids)} utterances, {len(X)} frames")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "raw")
        run("synth", raw, "--utts", 6, "--seed", 7, "--quiet")
        # Two utterances shorter than the largest k: a 3-frame and a 1-frame one.
        short = np.random.default_rng(1).normal(size=(3, 28)).astype(np.float32)
        np.save(os.path.join(raw, "mfcc", "zz-short.npy"), short)
        np.save(os.path.join(raw, "transcript", "zz-short.npy"),
                np.array(["[SOS]", "AA", "B", "CH", "[EOS]"]))
        np.save(os.path.join(raw, "mfcc", "zz-tiny.npy"), short[:1] * 3)
        np.save(os.path.join(raw, "transcript", "zz-tiny.npy"), np.array(["[SOS]", "ZH", "[EOS]"]))
        for dtype in ("f32", "f16", "bf16"):
            out = os.path.join(tmp, "out-" + dtype)
            run("pack", raw, out, "--dtype", dtype, "--guard", 8, "--shard-size", "200K",
                "--quiet")
            check(raw, out, tmp, dtype, False, [0, 1, 8, 9, 30])
        out = os.path.join(tmp, "out-norm")
        run("pack", raw, out, "--normalize", "utterance", "--quiet")
        check(raw, out, tmp, "f32", True, [5])
        check_stats_and_normalize(raw, os.path.join(tmp, "out-f32"), tmp)
        check_single_shard(os.path.join(tmp, "out-bf16"), tmp)


def check_stats_and_normalize(raw, out, tmp):
    """The stored statistics are those of the stored values, and gather
    --normalize applies them (in float32, padding left at 0)."""
    info = json.loads(subprocess.run([EXE, "info", out, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    _, utts = reference.dataset(raw, "f32")
    allf = np.concatenate([f for f, _ in utts]).astype(np.float64)
    mean, var = np.array(info["stats"]["mean"]), np.array(info["stats"]["var"])
    assert np.allclose(mean, allf.mean(axis=0), rtol=1e-12, atol=1e-12)
    assert np.allclose(var, allf.var(axis=0), rtol=1e-9, atol=1e-12)
    counts = np.bincount(np.concatenate([l for _, l in utts]), minlength=42)
    assert info["stats"]["label_counts"] == counts.tolist()
    # spec 7.4: binary64 arithmetic, one rounding to float32 at the end
    s64 = np.array([1.0 / np.sqrt(v) if v > 0 else 1.0 for v in var])
    k = 4
    x = os.path.join(tmp, "xn.npy")
    run("gather", out, "--context", k, "--all", "--normalize", "--threads", 2, "--out", x)
    X = np.load(x)
    ref = []
    for f, _ in utts:
        n = ((f.astype(np.float64) - mean) * s64).astype(np.float32)
        ref.append(reference.windows(n, k))
    ref = np.concatenate(ref)
    assert np.array_equal(X.view(np.uint32), ref.view(np.uint32)), "normalised windows differ"
    print(f"ok: stored statistics and --normalize, {len(X)} frames")


def check_single_shard(out, tmp):
    """A shard opened alone serves the same windows as within its dataset."""
    info = json.loads(subprocess.run([EXE, "info", out, "--json"], check=True,
                                     capture_output=True, text=True).stdout)
    assert info["shards"] >= 2
    full, _ = gather_all(out, 12, tmp)
    start = 0
    for s in range(info["shards"]):
        path = os.path.join(out, "shard-%06d.cxs" % s)
        X, Y = gather_all(path, 12, tmp)
        assert np.array_equal(X.view(np.uint32), full[start:start + len(X)].view(np.uint32))
        start += len(X)
    assert start == len(full)
    print(f"ok: {info['shards']} shards opened alone")


if __name__ == "__main__":
    main()
