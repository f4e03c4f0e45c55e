"""Benchmark: zstd-compressed shards against the uncompressed form, in one
run on one dataset.  For float32, float16 and bfloat16 storage:

- compression ratio (FEATURES bytes / ZFEATURES bytes) and convert
  throughput (MB/s of decoded features) for levels 1, 3, 9 with and without
  the byte-shuffle filter at the default chunk size, and for chunk sizes
  16K..1M at the default level;
- decode throughput: all frames read in order (k=0), relative to the
  uncompressed form;
- random-window gather (k=30, B=1024, uniform random frames) relative to
  the uncompressed form, with the default 256 MiB cache (the dataset fits:
  after warm-up every chunk is decoded once) and with a 16 MiB cache (most
  windows miss and decode a chunk);
- pack --compress time relative to a plain pack.

Medians of --repeats; the machine is shared, so read the ratios.  --raw DIR
runs on your own data (the synthetic features are per-phoneme means plus
noise, like real MFCCs: exponents compress, mantissas do not).

usage: /usr/bin/python3 bench/compress.py [--utts 400] [--repeats 3] [--raw DIR]
                                          [--build build]"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--utts", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--raw", default=None)
    ap.add_argument("--batches", type=int, default=100)
    a = ap.parse_args()
    exe = os.path.abspath(os.path.join(a.build, "tools", "ctxshard"))
    os.environ.setdefault("CTXSHARD_LIB", os.path.abspath(
        os.path.join(a.build, "lib", "libctxshard.so")))
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import numpy as np
    import ctxshard

    tmp = tempfile.mkdtemp()

    def run(*args):
        t = time.perf_counter()
        subprocess.run([exe, *map(str, args), "--quiet"], check=True)
        return time.perf_counter() - t

    def med(f, n=a.repeats):
        return statistics.median(f() for _ in range(n))

    try:
        raw = a.raw or os.path.join(tmp, "raw")
        if not a.raw:
            subprocess.run([exe, "synth", raw, "--utts", str(a.utts), "--seed", "7", "--quiet"],
                           check=True)
        rng = np.random.default_rng(1)
        for dtype in ("f32", "f16", "bf16"):
            plain = os.path.join(tmp, "plain-" + dtype)
            t_plain = med(lambda: run("pack", raw, plain, "--dtype", dtype))
            t_zpack = med(lambda: run("pack", raw, os.path.join(tmp, "zp"), "--dtype", dtype,
                                      "--compress", "zstd"))
            ds0 = ctxshard.open(plain)
            info = ds0.info
            fbytes = info["feature_bytes"]
            print(f"\n== {dtype}: {len(ds0)} frames x {ds0.dim}, features {fbytes / 2**20:.1f} MiB;"
                  f" pack --compress zstd takes {t_zpack / t_plain:.2f}x a plain pack "
                  f"({t_zpack:.2f} s vs {t_plain:.2f} s)")
            print(f"{'level':>5} {'chunk':>6} {'shuffle':>7} {'ratio':>6} {'enc MB/s':>9}"
                  f" {'seq read':>9} {'gather 256M':>12} {'gather 16M':>11}")
            frames_seq = np.arange(len(ds0))
            batches = [rng.integers(0, len(ds0), 1024) for _ in range(a.batches)]

            def seq(ds):
                t = time.perf_counter()
                for i in range(0, len(ds), 65536):
                    ds.gather(frames_seq[i:i + 65536], 0, threads=1)
                return time.perf_counter() - t

            def rand(ds, n=len(batches)):
                for b in batches[:10]:  # warm-up: fill the cache as training would
                    ds.gather(b, 30, threads=1)
                t = time.perf_counter()
                for b in batches[:n]:
                    ds.gather(b, 30, threads=1)
                return (time.perf_counter() - t) / n

            t_seq0 = med(lambda: seq(ds0))
            t_rand0 = med(lambda: rand(ds0))
            if dtype == "f32":
                configs = [(lv, "64K", sh) for lv in (1, 3, 9) for sh in (True, False)]
                configs += [(3, c, True) for c in ("4K", "16K", "256K", "1M")]
            else:  # the other dtypes: the filter and the chunk size that matter most
                configs = [(3, "64K", True), (3, "64K", False), (3, "16K", True)]
            for lv, chunk, sh in configs:
                z = os.path.join(tmp, f"z-{dtype}-{lv}-{chunk}-{sh}")
                opts = ["--compress", f"zstd:{lv}", "--chunk-size", chunk]
                if not sh:
                    opts.append("--no-shuffle")
                t_enc = med(lambda: run("convert", plain, z, *opts))
                dz = ctxshard.open(z)
                ratio = fbytes / dz.info["stored_feature_bytes"]
                t_seq = med(lambda: seq(dz))
                t_rand = med(lambda: rand(dz))
                small = ctxshard.open(z, cache_bytes=16 << 20)
                t_small = med(lambda: rand(small, 5))
                print(f"{lv:>5} {chunk:>6} {'yes' if sh else 'no':>7} {ratio:6.3f}"
                      f" {fbytes / t_enc / 1e6:9.0f} {t_seq0 / t_seq:8.2f}x"
                      f" {t_rand0 / t_rand:11.2f}x {t_rand0 / t_small:10.2f}x")
                del dz, small
                shutil.rmtree(z)
        print("\nseq read, gather: throughput relative to the uncompressed form "
              "(1.00x = as fast); ratio: uncompressed / compressed feature bytes")
    finally:
        shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
