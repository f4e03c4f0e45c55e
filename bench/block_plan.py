"""Benchmark: the block sampler's epoch plan against another build of the
library (issue 28): the plan's heap bytes (what malloc was asked for),
resident and virtual growth, build time, block-order throughput and the
order's hash, each run a fresh process of build/bench/block_plan, the two
libraries alternating; medians [min-max] and new / base ratios.

usage: /usr/bin/python3 bench/block_plan.py --base OLD_BUILD/lib [--runs 5]
           [--memory BYTES] [--blocks 8] [--all] DATASET...

OLD_BUILD/lib holds the other libctxshard.so.0 (a build of another commit:
`git archive COMMIT | tar -x -C DIR && meson setup DIR/build && ninja -C
DIR/build`); the benchmark binary is this tree's, pointed at each library
with LD_LIBRARY_PATH.  --all hashes every position of epochs 0 and 1."""
import argparse, json, os, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXE = os.path.join(HERE, "..", "build", "bench", "block_plan")
NEW = os.path.join(HERE, "..", "build", "lib")


def run(lib, path, a):
    cmd = [EXE, path, str(a.memory), str(a.blocks)] + (["all"] if a.all else [])
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.abspath(lib))
    return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True,
                                     text=True).stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--memory", type=int, default=1 << 30)
    ap.add_argument("--blocks", type=int, default=8)
    ap.add_argument("--all", action="store_true")
    ap.add_argument("datasets", nargs="+")
    a = ap.parse_args()
    for path in a.datasets:
        res = {"base": [], "new": []}
        for r in range(a.runs):
            order = [("base", a.base), ("new", NEW)]
            for name, lib in order if r % 2 == 0 else order[::-1]:
                res[name].append(run(lib, path, a))
        b0, n0 = res["base"][0], res["new"][0]
        print(f"{path}: {b0['utterances']:,} utterances, {b0['frames']:,} frames, "
              f"{b0['blocks']} blocks ({a.memory} bytes over {a.blocks}+1)")
        same = all(x["order_hash"] == b0["order_hash"] for x in res["base"] + res["new"])
        print(f"  order hash over {b0['hashed']:,} positions of epochs 0 and 1: "
              f"{'identical' if same else 'DIFFERENT'} ({b0['order_hash']})")
        for key, unit, scale in [("plan_heap_bytes", "B", 1), ("plan_rss_kib", "KiB", 1),
                                 ("plan_vm_kib", "KiB", 1), ("build_s", "ms", 1e3),
                                 ("first_plan_s", "ms", 1e3),
                                 ("order_frames_per_s", "M frames/s", 1e-6)]:
            row = []
            for name in ("base", "new"):
                v = [x[key] * scale for x in res[name]]
                row.append(statistics.median(v))
                print(f"  {key:20s} {name:4s}: {row[-1]:14,.3f} {unit} "
                      f"[{min(v):,.3f}-{max(v):,.3f}]")
            if row[0]:
                print(f"  {key:20s} new/base: {row[1] / row[0]:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
