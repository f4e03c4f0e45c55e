"""Benchmark: the runtime reader, side by side in one run on one dataset
(k=30, B=1024, float32, >= 2M frames): ctxshard's loader with 1 and 2
threads, and with 1 thread serving from a copy in huge pages
(hugepage_budget); the memcpy floor (malloc'd array) and its controls (the
same copies from anonymous memory in 4 KiB and in 2 MiB pages, and from
the shard's mapping); numpy fancy indexing of a padded in-memory array;
time to first batch against the load-everything init, and anonymous memory
while reading an epoch.  Medians of interleaved repetitions; prints ratios,
per second and per CPU second (steadier on a shared machine).

usage: /usr/bin/python3 bench/read.py [--utts 1600] [--repeats 7] [--batches 200]
                                      [--dir DIR] [--build build]"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def keyvals(text):
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        try:
            out[k] = float(v)
        except ValueError:
            pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--utts", type=int, default=1600)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    exe = os.path.join(a.build, "tools", "ctxshard")
    rb = os.path.join(a.build, "bench", "read_bench")
    work = a.dir or tempfile.mkdtemp(prefix="ctxshard-read-")
    raw, packed = os.path.join(work, "raw"), os.path.join(work, "packed")
    if not os.path.exists(packed):
        shutil.rmtree(raw, ignore_errors=True)
        subprocess.run([exe, "synth", raw, "--utts", str(a.utts), "--seed", "2", "--quiet"],
                       check=True)
        subprocess.run([exe, "pack", raw, packed, "--quiet"], check=True)
    k, B = 30, 1024
    c_runs, np_runs = [], []
    for r in range(a.repeats):  # interleaved, one repetition each per round
        c_runs.append(keyvals(subprocess.run([rb, packed, str(k), str(B), str(a.batches), "3"],
                                             check=True, capture_output=True, text=True).stdout))
        np_runs.append(keyvals(subprocess.run(
            [sys.executable, os.path.join(HERE, "read_numpy.py"), raw, str(k), str(B),
             str(a.batches), "1"], check=True, capture_output=True, text=True).stdout))

    def med(runs, key):
        return statistics.median(r[key] for r in runs)

    floor, l1, l2 = med(c_runs, "memcpy_floor_sps"), med(c_runs, "loader1_sps"), med(c_runs, "loader2_sps")
    nps = med(np_runs, "numpy_sps")
    first, init = med(c_runs, "first_batch_ms"), med(np_runs, "numpy_init_first_batch_ms")
    wb = c_runs[0]["window_bytes"]
    print(f"\n{int(c_runs[0]['frames'])} frames, k={k} (window {int(wb)} bytes), B={B}, float32; "
          f"{a.repeats} interleaved runs of {a.batches} batches, medians; {os.cpu_count()} CPUs")
    print(f"{'reader':44s} {'samples/s':>11s} {'GB/s':>6s} {'vs floor':>9s} {'vs numpy':>9s}")
    for name, v in (("memcpy floor (1 thread, precomputed starts)", floor),
                    ("ctxshard loader, 1 thread", l1), ("ctxshard loader, 2 threads", l2),
                    ("numpy fancy indexing (padded array in RAM)", nps)):
        print(f"{name:44s} {v:11.0f} {v * wb / 1e9:6.2f} {v / floor:9.2f} {v / nps:9.2f}")
    paired = med(c_runs, "loader1_over_floor")
    print(f"\nloader 1 thread / memcpy floor:  {l1 / floor:.2f} of the medians, {paired:.2f} "
          f"median of paired runs  (target >= 0.8)")
    lh = med(c_runs, "loader1_huge_sps")
    print(f"loader 1 thread, copy in huge pages (hugepage_budget) / floor: {lh / floor:.2f} of "
          f"the medians, {med(c_runs, 'loader1_huge_over_floor'):.2f} median of paired runs")
    print(f"loader 2 threads / numpy:        {l2 / nps:.2f}  (target >= 1.5)")
    print(f"time to first batch: ctxshard open + first batch {first:.2f} ms, "
          f"load-everything init + first batch {init:.0f} ms: {init / first:.0f}x  "
          f"(targets < 10 ms, >= 100x)")
    ring = c_runs[0]["ring_kb"] / 1024
    print(f"RssAnon while reading a whole epoch with the loader: "
          f"{med(c_runs, 'rss_anon_peak_kb') / 1024:.1f} MiB (ring of batch buffers "
          f"{ring:.1f} MiB; dataset {c_runs[0]['dataset_kb'] / 1024:.0f} MiB mapped, not "
          f"anonymous); numpy's load-everything: {med(np_runs, 'numpy_rss_anon_kb') / 1024:.0f} MiB")
    c0 = c_runs[0]
    print(f"\nper-page controls (the floor's array: {c0['floor_anon_huge_kb'] / 1024:.0f} MiB in "
          f"huge pages of {c0['features_kb'] / 1024:.0f} MiB; the 2 MiB copy "
          f"{c0['anon2m_huge_kb'] / 1024:.0f} MiB; the mapping {c0['map_pmd_kb'] / 1024:.0f} MiB "
          f"mapped in 2 MiB; the loader's copy {c0['huge_copy_huge_kb'] / 1024:.0f} MiB, made in "
          f"{med(c_runs, 'open_huge_ms'):.0f} ms at open)")
    print(f"{'':44s} {'samples/s':>11s} {'vs floor':>9s} {'per CPU s':>11s} {'vs floor':>9s}")
    for name, key, cpu in (("memcpy floor (malloc, as above)", "memcpy_floor", "floor"),
                           ("floor from anonymous 4 KiB pages", "floor_anon4k", "anon4k"),
                           ("floor from anonymous 2 MiB pages", "floor_anon2m", "anon2m"),
                           ("floor from the shard's mapping", "floor_map", "map"),
                           ("loader 1 thread (the mapping)", "loader1", "loader1"),
                           ("loader 1 thread (copy in huge pages)", "loader1_huge", "loader1_huge"),
                           ("loader 2 threads (the mapping)", "loader2", "loader2")):
        v = med(c_runs, key + "_sps")
        print(f"{name:44s} {v:11.0f} {v / floor:9.2f} {med(c_runs, cpu + '_cpu_sps'):11.0f} "
              f"{med(c_runs, cpu + '_cpu_over_floor'):9.2f}")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if not a.dir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
