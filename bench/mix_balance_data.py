"""Synthetic datasets for `build/bench/mix_balance --utt` (lengths only
matter: one float16 dimension, zero features).

usage: /usr/bin/python3 bench/mix_balance_data.py OUT
writes OUT/a, OUT/b, OUT/c (3,000, 8,000 and 20,000 utterances of 100-1500,
100-1500 and 300-2500 frames) and OUT/p .. OUT/t (30,000 of 50-400, 5,000
of 200-3000, 12,000 of 100-800, 2,000 of 50-200, 9,000 of 400-1200)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ctxshard  # noqa: E402

SETS = [("a", 3000, 100, 1500, 1), ("b", 8000, 100, 1500, 1), ("c", 20000, 300, 2500, 1),
        ("p", 30000, 50, 400, 2), ("q", 5000, 200, 3000, 2), ("r", 12000, 100, 800, 2),
        ("s", 2000, 50, 200, 2), ("t", 9000, 400, 1200, 2)]


def main(out):
    rngs = {}
    for name, n, lo, hi, seed in SETS:
        rng = rngs.setdefault(seed, np.random.default_rng(seed))
        w = ctxshard.Writer(os.path.join(out, name), dtype="float16")
        for u in range(n):
            T = int(rng.integers(lo, hi))
            w.add(f"{name}{u:06d}", np.zeros((T, 1), np.float32))
        w.commit()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
