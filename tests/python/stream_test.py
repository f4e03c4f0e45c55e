"""Streaming a dataset at a URL in block order (CXS_OPEN_STREAM, a Loader
with shuffle="block" over a URL), against nginx on 127.0.0.1: open fetches
the metadata alone; the features arrive block by block as the loader reads
them, each checked against its block sum first.  Every batch equals the
local dataset's; each byte is downloaded once per node, also with two
processes streaming at once; a cache smaller than the dataset stays under
its limit; a damaged block is never served; a server gone mid-epoch ends
in an error naming the URL; every other reader of a streamed dataset is
refused; a dataset that cannot be streamed is fetched whole or refused.
Ctrl-C stops a loader waiting for a block from a server that stalls it,
and leaves the cache consistent; three processes hold one cache limit,
and so do a stream and a whole fetch into one cache.

usage: /usr/bin/python3 tests/python/stream_test.py BUILD_DIR SOURCE_ROOT"""
import errno
import http.server
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import remote_test as R  # noqa: E402  (its servers, datasets, TMP and environment)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ctxshard  # noqa: E402
from ctxshard.torch import Loader, UtteranceLoader  # noqa: E402

FEATURES, LABELS = 4, 5  # the section types (spec/format.md, 3.2)
PAGE = 4096
KW = dict(shuffle="block", memory="3M", seed=7, threads=2)  # blocks of 349,525 bytes


def make(name, *pack_args):
    """60 utterances in shards of about 1 MiB (9.3 MB in all), local."""
    raw, out = os.path.join(R.TMP, name + "-raw"), os.path.join(R.TMP, name)
    for argv in (["synth", raw, "--utts", "60", "--seed", "5", "--quiet"],
                 ["pack", raw, out, "--shard-size", "1M", "--quiet", *pack_args]):
        p = R.run(*argv)
        assert p.returncode == 0, p.stderr
    shutil.rmtree(raw)
    return out


def features_of(path, sec=FEATURES):
    """(offset, length) of a shard file's FEATURES (or section sec), from
    its section table."""
    with open(path, "rb") as f:
        head = f.read(PAGE)
    n = struct.unpack_from("<I", head, 24)[0]
    for i in range(n):
        t, _, off, length, _ = struct.unpack_from("<IIQQQ", head, 64 + 32 * i)
        if t == sec:
            return off, length
    raise AssertionError(f"{path}: no section {sec}")


def once_bytes(ds_dir):
    """The bytes of the shard files a stream downloads when it reads each
    byte once: all but FEATURES's page padding (a hole, never asked for)."""
    total = 0
    for f in os.listdir(ds_dir):
        if f.startswith("shard-"):
            p = os.path.join(ds_dir, f)
            off, length = features_of(p)
            pad = -(off + length) % PAGE
            total += os.path.getsize(p) - pad
    return total


def feature_bytes(ds_dir):
    return sum(features_of(os.path.join(ds_dir, f))[1] for f in os.listdir(ds_dir)
               if f.startswith("shard-"))


class StallingServer:
    """Python's http.server on 127.0.0.1 serving root with ranges, in a
    thread of this process, whose answers to requests for bytes of a
    shard's FEATURES wait until release(): a server that stalls the
    blocks (the metadata a streamed open fetches comes at once)."""

    def __init__(self, root):
        self.stalled = threading.Event()  # a block was asked for
        self.go = threading.Event()
        srv = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                p = os.path.join(root, self.path.lstrip("/"))
                if not os.path.isfile(p):
                    self.send_error(404)
                    return
                n = os.path.getsize(p)
                m = re.match(r"bytes=(\d+)-(\d*)$", self.headers.get("Range", ""))
                lo = int(m.group(1)) if m else 0
                hi = min(int(m.group(2)), n - 1) if m and m.group(2) else n - 1
                if os.path.basename(p).startswith("shard-"):
                    off, length = features_of(p)
                    if off <= lo < off + length:
                        srv.stalled.set()
                        srv.go.wait(300)
                with open(p, "rb") as f:
                    f.seek(lo)
                    body = f.read(hi - lo + 1)
                try:
                    self.send_response(206 if m else 200)
                    if m:
                        self.send_header("Content-Range", f"bytes {lo}-{hi}/{n}")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the client went (its transfer cancelled)
                    pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def url(self, path):
        return f"http://127.0.0.1:{self.srv.server_address[1]}/{path}"

    def release(self):
        self.go.set()

    def stop(self):
        self.go.set()
        self.srv.shutdown()
        self.srv.server_close()


def entry_bytes(cache):
    return sum(e["bytes"] for e in ctxshard.cache_entries(cache))


class Streaming(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.www = os.path.join(R.TMP, "swww")
        os.makedirs(cls.www)
        os.chmod(cls.www, 0o755)
        cls.a = make("s")
        cls.nb = make("nosums", "--block-sums", "off")
        for d in (cls.a, cls.nb):
            shutil.copytree(d, os.path.join(cls.www, os.path.basename(d)))
        # a copy with one byte of one block of FEATURES changed (its block
        # sum no longer matches; every other checksum is as packed)
        cls.dmg = os.path.join(cls.www, "dmg")
        shutil.copytree(cls.a, cls.dmg)
        victim = os.path.join(cls.dmg, "shard-000002.cxs")
        off, length = features_of(victim)
        cls.damaged_at = off + length // 2
        with open(victim, "r+b") as f:
            f.seek(cls.damaged_at)
            b = f.read(1)
            f.seek(cls.damaged_at)
            f.write(bytes([b[0] ^ 0x40]))
        # a copy with one LABELS byte changed to another valid symbol (its
        # block sum no longer matches: nothing else can tell)
        cls.dmglab = os.path.join(cls.www, "dmglab")
        shutil.copytree(cls.a, cls.dmglab)
        ds = ctxshard.open(cls.a)
        V = len(ds.vocab)
        ds.close()
        victim = os.path.join(cls.dmglab, "shard-000003.cxs")
        off, length = features_of(victim, LABELS)
        with open(victim, "r+b") as f:
            f.seek(off + length // 2)
            b = f.read(1)
            f.seek(off + length // 2)
            f.write(bytes([(b[0] + 1) % V]))
        cls.ng = R.Nginx(cls.www)

    @classmethod
    def tearDownClass(cls):
        cls.ng.stop()

    def cache(self, name):
        return os.path.join(R.TMP, "scache-" + name)

    def shard_bytes_served(self, since, name):
        return sum(b for p, st, b in self.ng.requests()[since:] if p.startswith(f"/{name}/shard-"))

    def test_block_epochs_are_exact_and_each_byte_comes_once(self):
        """Epoch 0 fetches every feature byte once, epoch 1 none (the cache
        holds them), a new loader on the cache none either (the entry, every
        block of it there, is a complete copy now); every batch equals the
        local dataset's."""
        before = len(self.ng.requests())
        cache = self.cache("exact")
        loc = Loader(self.a, 3, 100, **KW)
        rem = Loader(self.ng.url("s"), 3, 100, cache=cache, **KW)
        self.assertTrue(rem.dataset.streamed)
        self.assertEqual(rem.dataset.bytes_fetched, 0)
        # the metadata alone at open
        self.assertEqual(self.shard_bytes_served(before, "s"),
                         once_bytes(self.a) - feature_bytes(self.a))
        for epoch, fetched in ((0, feature_bytes(self.a)), (1, 0)):
            loc.set_epoch(epoch)
            rem.set_epoch(epoch)
            f0, n = rem.dataset.bytes_fetched, 0
            for (xa, ya), (xb, yb) in zip(loc, rem):
                self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb), (epoch, n))
                n += 1
            self.assertEqual(n, len(loc))
            self.assertEqual(rem.dataset.bytes_fetched - f0, fetched, epoch)
        self.assertEqual(self.shard_bytes_served(before, "s"), once_bytes(self.a))
        rem2 = Loader(self.ng.url("s"), 3, 100, cache=cache, **KW)
        self.assertFalse(rem2.dataset.streamed)  # every block came: a complete copy
        for (xa, ya), (xb, yb) in zip(Loader(self.a, 3, 100, **KW), rem2):
            self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb))
        self.assertEqual(rem2.dataset.bytes_fetched, 0)
        self.assertEqual(self.shard_bytes_served(before, "s"), once_bytes(self.a))

    def test_utterance_batches_in_block_mode_are_exact(self):
        """An UtteranceLoader in block mode (memory=) over a URL streams too:
        its batches (features, lengths, labels) equal the local dataset's,
        each feature byte fetched once, also through a cache smaller than
        the dataset."""
        # (a batch of 5,000 frames is 560 kB, held while it is copied; a
        # group of blocks 2.7 MB, the next fetched while one is served)
        kw = dict(frame_budget=5000, memory="3M", seed=5, threads=2)
        for name, limit in (("utt", None), ("utt-small", 7 << 20)):
            cache = self.cache(name)
            rem = UtteranceLoader(self.ng.url("s"), cache=cache, cache_limit=limit, **kw)
            self.assertTrue(rem.dataset.streamed)
            n, most = 0, 0
            for a, b in zip(UtteranceLoader(self.a, **kw), rem):
                self.assertEqual(len(a), len(b))
                for ta, tb in zip(a, b):
                    self.assertTrue(torch.equal(ta, tb), n)
                n += 1
                most = max(most, entry_bytes(cache))
            self.assertGreater(n, 0)
            self.assertEqual(n, len(UtteranceLoader(self.a, **kw)))
            if limit is None:
                self.assertEqual(rem.dataset.bytes_fetched, feature_bytes(self.a))
            else:
                self.assertLessEqual(most, limit)

    def test_a_cache_smaller_than_the_dataset_stays_under_its_limit(self):
        limit = 5 << 20  # the dataset is 9.3 MB; a round holds about 4 MB
        cache = self.cache("small")
        loc = Loader(self.a, 3, 100, **KW)
        rem = Loader(self.ng.url("s"), 3, 100, cache=cache, cache_limit=limit, **KW)
        for epoch in (0, 1):
            loc.set_epoch(epoch)
            rem.set_epoch(epoch)
            most = 0
            for (xa, ya), (xb, yb) in zip(loc, rem):
                self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb))
                most = max(most, entry_bytes(cache))
            self.assertLessEqual(most, limit)
            self.assertGreater(most, limit // 2)
        # some blocks were evicted and fetched again: more than once over
        # two epochs, less than twice (the edges of blocks shared by two
        # are what a tight cache fetches again within an epoch)
        self.assertGreater(rem.dataset.bytes_fetched, feature_bytes(self.a))
        self.assertLess(rem.dataset.bytes_fetched, 2 * feature_bytes(self.a))

    def test_a_streamed_epoch_keeps_requests_in_flight(self):
        """The blocks of an epoch come at the link's pace, not a timer's,
        from an empty cache smaller than the dataset while a loader that
        does nothing but wait takes its batches.  From nginx on 127.0.0.1
        (answers in under a millisecond): the loader waits 50 ms or more
        with no request in flight at no more than 1 in 6 of the gaps
        between requests (the next blocks are fetched ahead while one is
        served; at a load of 8-12, this test alone: 0 to 2 such gaps of
        125-174 after, 0 and 4 of 125 before; beside the other streaming
        suites run at once, 10 of 124 after: requests that take under a
        millisecond leave the loader little to wait for but its helpers'
        turns on a CPU, and the bound leaves room for a loaded machine).
        From nginx sending each answer at 4 MB/s (a request lasts tens of
        milliseconds, longer than the log's millisecond): requests
        overlap, and more are in flight at once than one block's fetch
        sends (4): the fetch-ahead's beside the helper's (before: at most
        4, one block at a time; after, 8)."""
        slow = R.Nginx(self.www, limit_rate="4m")
        try:
            for ng, name in ((self.ng, "pace"), (slow, "pace-slow")):
                rem = Loader(ng.url("s"), 3, 100, cache=self.cache(name), cache_limit=8 << 20,
                             **KW)
                since = len(ng.timings())
                t0 = time.time()
                waits, it = [], iter(rem)  # when the loader was asked for a batch, and answered
                while True:
                    a = time.time()
                    if next(it, None) is None:
                        break
                    waits.append((a, time.time()))
                reqs = sorted((a, b) for p, a, b in ng.timings()[since:]
                              if p.startswith("/s/shard-") and a >= t0 - 0.002)
                self.assertGreater(len(reqs), 10)
                if ng is self.ng:
                    # of each gap between requests, the time the loader waited in it
                    gaps, end = [], reqs[0][1]
                    for a, b in reqs[1:]:
                        gaps.append(sum(max(0.0, min(a, y) - max(end, x)) for x, y in waits))
                        end = max(end, b)
                    # (a few remain on a loaded machine: the helpers' turns on a CPU)
                    long = sum(1 for g in gaps if g >= 0.050)
                    self.assertLessEqual(long, len(gaps) // 6, f"the loader waited 50 ms or "
                                         f"more with no request in flight {long} times in "
                                         f"{len(gaps)}; the longest (s): {sorted(gaps)[-5:]}")
                else:
                    overlapping = sum(1 for (_, b), (a, _) in zip(reqs, reqs[1:]) if a < b)
                    self.assertGreater(overlapping, len(reqs) // 4, f"{overlapping} of "
                                       f"{len(reqs)} requests started before the one before "
                                       "had ended")
                    most, now = 0, 0
                    for _, step in sorted([(a, 1) for a, _ in reqs] + [(b, -1) for _, b in reqs]):
                        now += step
                        most = max(most, now)
                    self.assertGreater(most, 4, "requests in flight at once")
        finally:
            slow.stop()

    def test_requests_reuse_their_connections(self):
        """The range requests of a streamed open and epoch go over a few
        kept connections (keep-alive), not a connection each: nginx's
        $connection numbers in its log are far fewer than the requests
        (before: one connection a request)."""
        since = len(self.ng.connections())
        rem = Loader(self.ng.url("s"), 3, 100, cache=self.cache("conns"), cache_limit=5 << 20,
                     **KW)
        for _ in rem:
            pass
        got = [c for p, c in self.ng.connections()[since:] if p.startswith("/s/")]
        self.assertGreater(len(got), 50)
        self.assertLessEqual(len(set(got)), len(got) // 4, f"{len(set(got))} connections for "
                             f"{len(got)} requests")

    def test_a_cache_entry_that_comes_to_hold_every_block_is_a_complete_copy(self):
        """A streamed epoch through a cache that holds the dataset leaves a
        complete copy: a later open of the URL, whole (not streamed), opens
        it as it is, downloading no shard again (nginx's log), and serves
        what the local dataset does (before: the streamed entry was
        downloaded whole again)."""
        cache = self.cache("promote")
        rem = Loader(self.ng.url("s"), 3, 100, cache=cache, **KW)
        for _ in rem:
            pass
        self.assertEqual(rem.dataset.bytes_fetched, feature_bytes(self.a))
        del rem
        import gc
        gc.collect()
        self.assertEqual([e["complete"] for e in ctxshard.cache_entries(cache)], [True])
        since = len(self.ng.requests())
        whole = ctxshard.open(self.ng.url("s"), cache=cache)
        self.assertFalse(whole.streamed)
        self.assertEqual([p for p, _, _ in self.ng.requests()[since:]], ["/s/manifest.cxs"])
        loc = Loader(self.a, 3, 100, shuffle=True, seed=3)
        for (xa, ya), (xb, yb) in zip(loc, Loader(whole, 3, 100, shuffle=True, seed=3)):
            self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb))
        whole.close()

    def test_a_cached_copy_opens_by_its_url_while_the_server_is_down(self):
        """Start nginx, open (a streamed epoch: a complete copy in one
        cache, the metadata and some blocks in another), stop nginx, open
        again by the URL: the cached copy opens as it is, with a warning
        that it was not checked against the server's manifest, and serves
        what the local dataset does; a cache without a copy refuses,
        naming the URL and the failure (before: every open asked the server
        for the manifest first, and failed)."""
        import warnings
        ng = R.Nginx(self.www)
        url = ng.url("s")
        try:
            for name, limit in (("offline", None), ("offline-small", 5 << 20)):
                for _ in Loader(url, 3, 100, cache=self.cache(name), cache_limit=limit, **KW):
                    pass
        finally:
            ng.stop()
        retries = os.environ.get("CTXSHARD_HTTP_RETRIES")
        os.environ["CTXSHARD_HTTP_RETRIES"] = "0"
        try:
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                ds = ctxshard.open(url, cache=self.cache("offline"))
                part = ctxshard.open(url, cache=self.cache("offline-small"), stream=True)
            self.assertEqual(len(w), 2, [str(x.message) for x in w])
            self.assertIn(url + ": the server cannot be reached: opened the cache's copy as it "
                          "is, not checked against the server's manifest", str(w[0].message))
            self.assertFalse(ds.streamed)
            self.assertTrue(part.streamed)
            part.close()
            loc = Loader(self.a, 3, 100, shuffle=True, seed=3)
            for (xa, ya), (xb, yb) in zip(loc, Loader(ds, 3, 100, shuffle=True, seed=3)):
                self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb))
            ds.close()
            with self.assertRaises(OSError) as cm:  # streamed, not complete: not whole
                ctxshard.open(url, cache=self.cache("offline-small"))
            self.assertIn("holds no copy of " + url, str(cm.exception))
            with self.assertRaises(OSError) as cm:
                ctxshard.open(url, cache=self.cache("offline-none"))
            self.assertIn(url + "/manifest.cxs: ", str(cm.exception))
            self.assertIn("holds no copy of " + url, str(cm.exception))
        finally:
            if retries is None:
                del os.environ["CTXSHARD_HTTP_RETRIES"]
            else:
                os.environ["CTXSHARD_HTTP_RETRIES"] = retries

    def test_a_limit_below_what_a_round_holds_is_refused_with_the_numbers(self):
        rem = Loader(self.ng.url("s"), 3, 100, cache=self.cache("tiny"), cache_limit="2M",
                     **KW)
        with self.assertRaises(OSError) as cm:
            for _ in rem:
                pass
        self.assertEqual(cm.exception.errno, errno.ENOSPC)
        self.assertIn(self.ng.url("s") + ": the cache limit of 2097152 bytes cannot hold the "
                      "blocks the block sampler reads at once", str(cm.exception))
        self.assertLessEqual(entry_bytes(self.cache("tiny")), 2 << 20)

    def test_info_of_a_url_fetches_its_metadata_alone(self):
        """ctxshard info URL under a cache limit of 1 MiB (the dataset is
        9.3 MB) answers as info of the local copy does, and fetches the
        manifest and every shard's bytes but its features, not one byte
        more: 3.4% of this dataset, whose features are 28 float32 a frame
        against a label byte, in shards of 1 MiB with each section
        page-aligned (before: refused, "more than the cache limit";
        without a limit it downloaded the whole dataset)."""
        total = meta = 0
        for f in os.listdir(self.a):
            size = os.path.getsize(os.path.join(self.a, f))
            total += size
            meta += size
            if f.startswith("shard-"):
                off, length = features_of(os.path.join(self.a, f))
                meta -= (off + length + PAGE - 1) // PAGE * PAGE - off
        before = len(self.ng.requests())
        p = R.run("info", self.ng.url("s"), "--json", "--cache", self.cache("info"),
                  "--cache-limit", "1M")
        self.assertEqual(p.returncode, 0, p.stderr)
        got = sum(b for path, st, b in self.ng.requests()[before:] if path.startswith("/s/"))
        self.assertEqual(got, meta, f"{got} bytes fetched; the metadata is {meta}")
        self.assertLess(got, total // 25)
        local = R.run("info", self.a, "--json")
        drop = re.compile(r'^\s*"path": .*$', re.M)
        self.assertEqual(drop.sub("", p.stdout), drop.sub("", local.stdout))

    def test_two_processes_streaming_at_once_download_each_byte_once(self):
        before = len(self.ng.requests())
        code = ("import sys, hashlib, ctxshard.torch as ct\n"
                "h = hashlib.sha256()\n"
                "for x, y in ct.Loader(sys.argv[1], 3, 100, cache=sys.argv[2], "
                "shuffle='block', memory='3M', seed=7, threads=2):\n"
                "    h.update(x.numpy().tobytes()); h.update(y.numpy().tobytes())\n"
                "print(h.hexdigest())\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(R.SRC, "python"))
        ps = [subprocess.Popen([sys.executable, "-c", code, self.ng.url("s"),
                                self.cache("shared")], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]
        outs = [p.communicate(timeout=240) for p in ps]
        for p, (out, err) in zip(ps, outs):
            self.assertEqual(p.returncode, 0, err)
        import hashlib
        h = hashlib.sha256()
        for x, y in Loader(self.a, 3, 100, **KW):
            h.update(x.numpy().tobytes())
            h.update(y.numpy().tobytes())
        self.assertEqual([o.strip() for o, _ in outs], [h.hexdigest()] * 2)
        self.assertEqual(self.shard_bytes_served(before, "s"), once_bytes(self.a))

    def test_a_damaged_block_is_never_served(self):
        loc = Loader(self.a, 3, 100, **KW)
        rem = Loader(self.ng.url("dmg"), 3, 100, cache=self.cache("dmg"), **KW)
        served = 0
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            for (xa, ya), (xb, yb) in zip(loc, rem):
                self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb))
                served += 1
        self.assertLess(served, len(loc))
        self.assertIn("shard-000002.cxs", str(cm.exception))
        self.assertIn("fail their block sum (the copy at the URL is damaged); not served",
                      str(cm.exception))
        # the damaged sum block is not marked as there
        have = open(os.path.join(rem.dataset.cached_at, "shard-000002.cxs.have"), "rb").read()
        off, _ = features_of(os.path.join(self.dmg, "shard-000002.cxs"))
        self.assertEqual(have[(self.damaged_at - off) >> 16], 0)

    def test_a_damaged_label_is_never_served(self):
        """A LABELS byte changed on the server to another valid symbol: the
        streamed frame Loader and the block-mode UtteranceLoader stop at the
        batch that needs its block (they served it for a whole epoch: the
        stream checked FEATURES blocks only), naming the block."""
        makers = (("frames", lambda url, c: Loader(url, 3, 100, cache=c, **KW)),
                  ("utterances", lambda url, c: UtteranceLoader(url, frame_budget=5000, memory="3M",
                                                                seed=5, threads=2, cache=c)))
        for name, make in makers:
            with self.subTest(loader=name):
                rem = make(self.ng.url("dmglab"), self.cache("dmglab-" + name))
                self.assertTrue(rem.dataset.streamed)
                with self.assertRaises(ctxshard.CtxshardError) as cm:
                    for _ in rem:
                        pass
                msg = str(cm.exception)
                self.assertIn("shard-000003.cxs: LABELS block ", msg)
                self.assertIn("checksum mismatch", msg)
                self.assertIn("not served", msg)

    def test_server_gone_mid_epoch_names_the_url(self):
        ng = R.Nginx(self.www)
        url = ng.url("s")
        loc = Loader(self.a, 3, 100, **KW)
        rem = Loader(url, 3, 100, cache=self.cache("gone"), **KW)
        it_l, it_r = iter(loc), iter(rem)
        xa, _ = next(it_l)
        xb, _ = next(it_r)
        self.assertTrue(torch.equal(xa, xb))
        ng.stop()
        t0 = time.monotonic()
        with self.assertRaises(OSError) as cm:
            for (xa, ya), (xb, yb) in zip(it_l, it_r):
                self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb))
        self.assertLess(time.monotonic() - t0, 60)  # the retries end it: no hang
        self.assertIn(url + "/shard-", str(cm.exception))
        self.assertIn("after 3 attempts", str(cm.exception))

    def test_every_other_reader_of_a_streamed_dataset_is_refused(self):
        url = self.ng.url("s")
        ds = ctxshard.open(url, cache=self.cache("refuse"), stream=True)
        self.assertTrue(ds.streamed)
        said = "the dataset is open to stream"
        frames = np.arange(10, dtype=np.uint64)
        for call in (lambda: ds.gather(frames, 3), lambda: ds.window(5, 3),
                     lambda: ds.utterance(0), lambda: ds.verify(), lambda: ds.warm(),
                     lambda: next(iter(UtteranceLoader(ds, frame_budget=20000))),
                     lambda: list(Loader(ds, 3, 100, shuffle=True))):
            with self.assertRaises((ctxshard.CtxshardError, ValueError)) as cm:
                call()
            self.assertIn(said, str(cm.exception))
        # its cache entry, opened as a directory, would serve holes as zeros: refused
        with self.assertRaises(ctxshard.CtxshardError) as cm:
            ctxshard.open(ds.cached_at)
        self.assertIn("open it by its URL", str(cm.exception))
        # a whole open while it is open to stream would wait for it to close: refused
        with self.assertRaises(OSError) as cm:
            ctxshard.open(url, cache=self.cache("refuse"))
        self.assertEqual(cm.exception.errno, errno.EBUSY)
        ds.close()
        # opened whole, the same URL and cache serve everything (fetched and verified)
        with ctxshard.open(url, cache=self.cache("refuse")) as r, ctxshard.open(self.a) as lo:
            self.assertFalse(r.streamed)
            R.same(self, r, lo)

    def test_a_dataset_without_block_sums_is_fetched_whole_or_refused(self):
        url = self.ng.url("nosums")
        with self.assertRaises(OSError) as cm:
            Loader(url, 3, 100, cache=self.cache("nb-small"), cache_limit="5M", **KW)
        self.assertEqual(cm.exception.errno, errno.ENOSPC)
        self.assertIn("has no block sums", str(cm.exception))
        loc = Loader(self.nb, 3, 100, **KW)
        rem = Loader(url, 3, 100, cache=self.cache("nb"), **KW)
        self.assertFalse(rem.dataset.streamed)  # fetched whole and verified instead
        for (xa, ya), (xb, yb) in zip(loc, rem):
            self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb))

    def test_ctrl_c_stops_a_loader_waiting_for_a_block(self):
        """SIGINT to a process whose streamed Loader, or block-mode
        UtteranceLoader, waits for a block the server stalls: it catches
        KeyboardInterrupt, the loader freed, at once (the bound of 10 s
        only keeps the test from hanging: before, it waited for the block,
        here until the server is released), and the cache it leaves serves
        a whole epoch exactly, to a new open of the same URL and cache."""
        make_loader = {
            "frames": ("ct.Loader(sys.argv[1], 3, 100, cache=sys.argv[2], shuffle='block', "
                       "memory='3M', seed=7, threads=2)", lambda u, c: Loader(u, 3, 100, cache=c,
                                                                               **KW),
                       lambda: Loader(self.a, 3, 100, **KW)),
            "utterances": ("ct.UtteranceLoader(sys.argv[1], cache=sys.argv[2], "
                           "frame_budget=5000, memory='3M', seed=5, threads=2)",
                           lambda u, c: UtteranceLoader(u, cache=c, frame_budget=5000,
                                                        memory="3M", seed=5, threads=2),
                           lambda: UtteranceLoader(self.a, frame_budget=5000, memory="3M",
                                                   seed=5, threads=2))}
        # (a transfer with no byte for 5 s would be retried, then fail)
        env = dict(os.environ, PYTHONPATH=os.path.join(R.SRC, "python"),
                   CTXSHARD_HTTP_TIMEOUT="300")
        for kind, (make, remote, local) in make_loader.items():
            srv = StallingServer(self.www)
            try:
                url, cache = srv.url("s"), self.cache("sigint-" + kind)
                code = ("import sys, faulthandler, ctxshard.torch as ct\nfaulthandler.enable()\n"
                        f"it = iter({make})\n"
                        "try:\n"
                        "    next(it)\n"
                        "except KeyboardInterrupt:\n"
                        "    print('interrupted', flush=True)\n"
                        "    sys.exit(3)\n"
                        "print('served', flush=True)\n")
                p = subprocess.Popen([sys.executable, "-c", code, url, cache], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    self.assertTrue(srv.stalled.wait(120), kind)  # it waits for a block now
                    p.send_signal(signal.SIGINT)
                    t0 = time.monotonic()
                    # KeyboardInterrupt caught, the loader freed: its line
                    # (the interpreter's exit after it, which unloads torch,
                    # is not the loader's and may take seconds on a busy
                    # machine)
                    said = select.select([p.stdout], [], [], 10)[0] and p.stdout.readline()
                    dt = time.monotonic() - t0
                    out, err = p.communicate(timeout=120)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()
                    self.fail(f"{kind}: still running 120 s after SIGINT")
                self.assertEqual(said, "interrupted\n", f"{kind}: nothing 10 s after SIGINT")
                print(f"  {kind}: KeyboardInterrupt caught {dt:.2f} s after SIGINT",
                      file=sys.stderr)
                self.assertEqual(p.returncode, 3, err)
                srv.release()
                # the cache as it was left: a new open of the URL serves an
                # exact epoch (no block marked there that is not, no lock
                # left held)
                n = 0
                for a, b in zip(local(), remote(url, cache)):
                    self.assertEqual(len(a), len(b))
                    for ta, tb in zip(a, b):
                        self.assertTrue(torch.equal(ta, tb), (kind, n))
                    n += 1
                self.assertEqual(n, len(local()), kind)
            finally:
                srv.stop()

    def test_ctrl_c_stops_the_streaming_commands(self):
        """bench-read --sampler block and bench-utt --memory over a URL whose
        server stalls the blocks: SIGINT ends them at once with
        "URL: interrupted" (exit 3), their transfers ended; before, they
        died of the signal mid-transfer (or, with a handler, waited)."""
        exe = os.path.join(R.BUILD, "tools", "ctxshard")
        env = dict(os.environ, CTXSHARD_HTTP_TIMEOUT="300")
        for cmd in (["bench-read", "--sampler", "block", "--memory", "3M", "--batch", "100"],
                    ["bench-utt", "--memory", "3M", "--frame-budget", "5000"]):
            srv = StallingServer(self.www)
            try:
                url = srv.url("s")
                env["CTXSHARD_CACHE"] = self.cache("cli-" + cmd[0])
                p = subprocess.Popen([exe, cmd[0], url, *cmd[1:]], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    self.assertTrue(srv.stalled.wait(120), cmd[0])
                    p.send_signal(signal.SIGINT)
                    t0 = time.monotonic()
                    out, err = p.communicate(timeout=10)
                    print(f"  {cmd[0]}: ended {time.monotonic() - t0:.2f} s after SIGINT",
                          file=sys.stderr)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()
                    self.fail(f"{cmd[0]}: still running 10 s after SIGINT")
                self.assertEqual(p.returncode, 3, err)
                self.assertEqual(err.strip().splitlines()[-1], f"ctxshard: {url}: interrupted")
            finally:
                srv.stop()

    def test_three_processes_hold_one_cache_limit(self):
        """Three processes streaming into one cache under cache_limit=6M
        (each its own order, behind a server that sends 2 MB/s a request,
        so that their fetches overlap): each fetch is reserved in every
        process's count of the cache.  Before, each counted only its own
        fetches in flight and together they held up to 6.66 MB.  Every
        process samples the cache's bytes on disk as each piece of its
        fetches lands (CXS_CACHE_AUDIT, a test hook): never above the
        limit; every epoch exact."""
        limit = 6 << 20
        ng = R.Nginx(self.www, limit_rate="2m")
        cache, audit = self.cache("three"), os.path.join(R.TMP, "three-audit")
        code = ("import sys, hashlib, ctxshard.torch as ct\n"
                "h = hashlib.sha256()\n"
                "for x, y in ct.Loader(sys.argv[1], 3, 100, cache=sys.argv[2], "
                f"cache_limit={limit}, shuffle='block', memory='1M', blocks=2, "
                "seed=int(sys.argv[3]), threads=2):\n"
                "    h.update(x.numpy().tobytes()); h.update(y.numpy().tobytes())\n"
                "print(h.hexdigest())\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(R.SRC, "python"), CXS_CACHE_AUDIT=audit)
        seeds = (7, 8, 9)
        try:
            ps = [subprocess.Popen([sys.executable, "-c", code, ng.url("s"), cache, str(seed)],
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True) for seed in seeds]
            outs = [p.communicate(timeout=240) for p in ps]
        finally:
            ng.stop()
        for p, (out, err) in zip(ps, outs):
            self.assertEqual(p.returncode, 0, err)
        import hashlib
        for seed, (out, _) in zip(seeds, outs):
            h = hashlib.sha256()
            for x, y in Loader(self.a, 3, 100, shuffle="block", memory="1M", blocks=2, seed=seed,
                               threads=2):
                h.update(x.numpy().tobytes())
                h.update(y.numpy().tobytes())
            self.assertEqual(out.strip(), h.hexdigest(), seed)
        with open(audit) as f:
            sizes = [int(v) for v in f.read().split()]
        print(f"  {len(sizes)} samples, the largest {max(sizes)} bytes (limit {limit})",
              file=sys.stderr)
        self.assertGreater(len(sizes), 20)
        self.assertLessEqual(max(sizes), limit)
    def test_a_whole_fetch_beside_a_stream_holds_the_cache_limit(self):
        """A process streaming into a cache under cache_limit=6M, its first
        fetch reserved and in flight (the server stalls it), and a process
        fetching another dataset whole into the same cache under the same
        limit, sized to fit only when that fetch in flight is not counted:
        the whole fetch counts it (ROOT/.reservations) and waits for it
        (its progress is called meanwhile, before its entry exists; then,
        the stream's bytes landed, it is refused with ENOSPC or fetched).
        Before, it counted only the entries on disk and fetched at once,
        and the stream's bytes landed on top of it: the cache's bytes on
        disk (CXS_CACHE_AUDIT, sampled in both processes as each piece
        lands) above the limit.  The stream's epoch is exact either way."""
        if os.environ.get("CXS_TEST_HOOKS", "1") != "1":
            self.skipTest("built without the test hooks (-Dtest_hooks=true): no audit")
        limit = 6 << 20
        cache, audit = self.cache("mixed"), os.path.join(R.TMP, "mixed-audit")
        env = dict(os.environ, PYTHONPATH=os.path.join(R.SRC, "python"), CXS_CACHE_AUDIT=audit,
                   CTXSHARD_HTTP_TIMEOUT="300")
        stream_code = ("import sys, hashlib, ctxshard.torch as ct\n"
                       "h = hashlib.sha256()\n"
                       "for x, y in ct.Loader(sys.argv[1], 3, 100, cache=sys.argv[2], "
                       f"cache_limit={limit}, shuffle='block', memory='3M', seed=7, "
                       "threads=2):\n"
                       "    h.update(x.numpy().tobytes()); h.update(y.numpy().tobytes())\n"
                       "print(h.hexdigest())\n")
        # the whole fetch: "waiting" when its progress is called before its
        # entry (the `source` naming its URL) exists, i.e. while it waits
        # for room; then "fetched" or the errno it was refused with
        whole_code = ("import sys, os, errno, ctxshard\n"
                      "url, cache = sys.argv[1], sys.argv[2]\n"
                      "said = []\n"
                      "def entry():\n"
                      "    for e in os.listdir(cache):\n"
                      "        try:\n"
                      "            with open(os.path.join(cache, e, 'source')) as f:\n"
                      "                if f.read().strip() == url: return True\n"
                      "        except OSError: pass\n"
                      "    return False\n"
                      "def progress(done, total):\n"
                      "    if not said and not entry():\n"
                      "        said.append(1); print('waiting', flush=True)\n"
                      "try:\n"
                      f"    ctxshard.fetch(url, cache=cache, cache_limit={limit}, "
                      "progress=progress)\n"
                      "    print('fetched', flush=True)\n"
                      "except OSError as e:\n"
                      "    print(errno.errorcode[e.errno], e, flush=True)\n")
        srv, ps, pw = StallingServer(self.www), None, None
        try:
            ps = subprocess.Popen([sys.executable, "-c", stream_code, srv.url("s"), cache],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
            try:
                self.assertTrue(srv.stalled.wait(120))  # its first fetch reserved, in flight
                # what the cache holds on disk and what is reserved now
                disk = sum(os.stat(os.path.join(dp, f)).st_blocks * 512
                           for dp, _, fs in os.walk(cache) for f in fs
                           if not os.path.relpath(dp, cache).startswith("."))
                with open(os.path.join(cache, ".reservations"), "rb") as f:
                    b = f.read()
                resv = sum(struct.unpack_from("<Q", b, i)[0] for i in range(0, len(b) - 7, 8))
                # a dataset that fits beside what is on disk (its entry's
                # small files, pages of 4 KiB, counted too), not beside the
                # fetch in flight as well
                room = limit - disk - (64 << 10)
                utts, whole = max(1, room // (160 << 10)) + 2, None
                while utts > 0:
                    name = f"whole{utts}"
                    out = os.path.join(self.www, name)
                    if not os.path.isdir(out):
                        shutil.copytree(R.make(name, utts, 3, shard_size="1M"), out)
                    size = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
                    if size <= room:
                        whole = (name, size)
                        break
                    utts -= 1
                self.assertIsNotNone(whole)
                self.assertGreater(disk + resv + whole[1], limit,
                                   (disk, resv, whole))  # the test's premise
                pw = subprocess.Popen([sys.executable, "-c", whole_code, srv.url(whole[0]),
                                       cache], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
                first = pw.stdout.readline()  # "fetched" before, "waiting" now
                srv.release()
                wout, werr = pw.communicate(timeout=240)
                sout, serr = ps.communicate(timeout=240)
            finally:
                for p in (ps, pw):
                    if p is not None and p.poll() is None:
                        p.kill()
                        p.communicate()
        finally:
            srv.stop()
        print(f"  stream beside a whole fetch of {whole[1]} bytes ({disk} on disk, {resv} "
              f"reserved): the whole fetch said {first.strip()!r}, then {wout.strip()!r}",
              file=sys.stderr)
        self.assertEqual(ps.returncode, 0, serr)
        self.assertEqual(pw.returncode, 0, werr)
        import hashlib
        h = hashlib.sha256()
        for x, y in Loader(self.a, 3, 100, **KW):
            h.update(x.numpy().tobytes())
            h.update(y.numpy().tobytes())
        self.assertEqual(sout.strip(), h.hexdigest())
        with open(audit) as f:
            sizes = [int(v) for v in f.read().split()]
        print(f"  {len(sizes)} samples, the largest {max(sizes)} bytes (limit {limit})",
              file=sys.stderr)
        self.assertLessEqual(max(sizes), limit)
        self.assertEqual(first, "waiting\n", wout)
        self.assertTrue(wout.startswith("fetched") or wout.startswith("ENOSPC"), wout)

    def test_cxs_loader_cancel_ends_the_wait_and_the_epoch_goes_on(self):
        """The C call: cxs_loader_cancel from another thread ends a
        cxs_loader_next_ex waiting for a block the server stalls
        (-ECANCELED; before, there was no way to end it); the transfers end,
        and once the server answers again the next calls serve the whole
        epoch, from the same batch, exactly."""
        from ctxshard import _native as _n
        from ctxshard._native import lib as _lib
        import ctypes
        srv = StallingServer(self.www)
        try:
            rem = Loader(srv.url("s"), 3, 100, cache=self.cache("cancel"), **KW)
            loc = Loader(self.a, 3, 100, **KW)
            opts = _n.LoaderOpts(3, 100, 2, 0, 0, 0, 1, 0)
            ptr, diag = ctypes.c_void_p(), _n.Diag()
            self.assertEqual(_lib.cxs_loader_create_ex(rem.dataset._ptr, rem.sampler._ptr,
                                                       ctypes.byref(opts), 0, 0,
                                                       ctypes.byref(ptr), ctypes.byref(diag)), 0)
            try:
                bp, got = ctypes.POINTER(_n.Batch)(), []

                def wait():  # (ctypes lets go of the GIL while it waits)
                    got.append(_lib.cxs_loader_next_ex(ptr, ctypes.byref(bp), None))

                t = threading.Thread(target=wait)
                t.start()
                self.assertTrue(srv.stalled.wait(120))
                self.assertEqual(_lib.cxs_loader_cancel(ptr), 0)
                t.join(10)
                self.assertFalse(t.is_alive(), "next() still waits 10 s after the cancel")
                self.assertEqual(got, [-errno.ECANCELED])
                srv.release()
                W, n = 7 * rem.dataset.dim, 0
                for xa, ya in loc:
                    self.assertEqual(_lib.cxs_loader_next_ex(ptr, ctypes.byref(bp),
                                                             ctypes.byref(diag)), 0,
                                     diag.message)
                    b = bp.contents
                    self.assertEqual((b.index, b.n), (n, len(xa)))
                    x = np.ctypeslib.as_array(ctypes.cast(b.x, ctypes.POINTER(ctypes.c_float)),
                                              shape=(b.n, W))
                    y = np.ctypeslib.as_array(ctypes.cast(b.y, ctypes.POINTER(ctypes.c_int64)),
                                              shape=(b.n,))
                    self.assertTrue(np.array_equal(x, xa.numpy()) and
                                    np.array_equal(y, ya.numpy()), n)
                    n += 1
                self.assertEqual(_lib.cxs_loader_next_ex(ptr, ctypes.byref(bp), None), 0)
                self.assertFalse(bp)  # the end
                self.assertEqual(n, len(loc))
            finally:
                _lib.cxs_loader_free(ptr)
        finally:
            srv.stop()


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
    finally:
        shutil.rmtree(R.TMP, ignore_errors=True)
