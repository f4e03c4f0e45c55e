"""Benchmark: the anonymous memory of a process that opened a dataset and
iterated one epoch of each loader (issue 28: at most 256 MiB more than
after the imports): RssAnon after open, after BATCHES batches of the frame
Loader (shuffled, context 4, batch 1024; its sampler is O(1) memory, so a
part of the epoch says the same as all of it), and after one whole epoch
of the UtteranceLoader (frame budget 4096).

usage: CTXSHARD_LIB=build/lib/libctxshard.so PYTHONPATH=python \
       /usr/bin/python3 bench/many_epoch.py DATASET BATCHES"""
import sys, time
def anon():
    for l in open('/proc/self/status'):
        if l.startswith('RssAnon'): return int(l.split()[1]) / 1024
import ctxshard, ctxshard.torch as cxt
p, fb = sys.argv[1], int(sys.argv[2])
base = anon()
ds = ctxshard.open(p)
print(f"after open: +{anon() - base:.1f} MiB")
t = time.perf_counter(); n = 0
L = cxt.Loader(ds, 4, 1024, shuffle=True, labels=False)
for x in L:
    n += 1
    if n >= fb: break
print(f"frame Loader, {n} batches ({n * 1024:,} samples, {time.perf_counter() - t:.0f} s): +{anon() - base:.1f} MiB")
del L
t = time.perf_counter(); n = 0; utts = 0
U = cxt.UtteranceLoader(ds, frame_budget=4096)
for b in U:
    n += 1; utts += b[0].shape[0]
print(f"UtteranceLoader, one epoch: {n} batches, {utts:,} utterances, {time.perf_counter() - t:.0f} s: +{anon() - base:.1f} MiB")
