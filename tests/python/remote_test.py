"""Datasets at URLs, against real servers on 127.0.0.1: nginx serving a
directory (range requests), an S3-compatible server that checks SigV4
signatures (tests/remote/s3_server.js: s3rver behind AWS's signer), and a
small misbehaving server of this file (bodies cut short, bodies too long,
a server that dies mid-body).  Every window and utterance served from a URL
equals the local dataset's; each file is downloaded once per node with two
processes sharing a cache; a dataset packed again at the same URL is a new
entry; the budget is honoured and an open dataset never evicted; wrong and
missing credentials are refused naming the variables; a server gone ends,
after the retries, in an error naming the URL, never in wrong data.

usage: /usr/bin/python3 tests/python/remote_test.py BUILD_DIR SOURCE_ROOT
Needs nginx (Debian's) and, for the S3 cases, node with the packages of
tests/remote/package.json installed there (`npm install --prefix
tests/remote`): .ci/run installs both.  Cases whose server is missing are
skipped, saying which."""
import collections
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
EXE = os.path.join(BUILD, "tools", "ctxshard")
os.environ.setdefault("CTXSHARD_LIB", os.path.join(BUILD, "lib", "libctxshard.so"))
sys.path.insert(0, os.path.join(SRC, "python"))

import numpy as np  # noqa: E402

import ctxshard  # noqa: E402

TMP = tempfile.mkdtemp(prefix="ctxshard-remote-")
os.chmod(TMP, 0o755)  # nginx's workers (another user) read below it
NODE_DIR = os.path.join(SRC, "tests", "remote")
# fast failures: the retries' backoff is 0.1, 0.2, 0.4 s ...
os.environ["CTXSHARD_HTTP_RETRIES"] = "2"
os.environ["CTXSHARD_HTTP_TIMEOUT"] = "5"
for v in ("CTXSHARD_CACHE", "CTXSHARD_CACHE_LIMIT", "AWS_ACCESS_KEY_ID",
          "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION",
          "AWS_DEFAULT_REGION", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
    os.environ.pop(v, None)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(*args, env=None):
    return subprocess.run([EXE, *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})))


def make(name, utts, seed, shard_size="256K"):
    """A packed dataset of several shards, local."""
    raw, out = os.path.join(TMP, name + "-raw"), os.path.join(TMP, name)
    for argv in (["synth", raw, "--utts", str(utts), "--seed", str(seed), "--quiet"],
                 ["pack", raw, out, "--shard-size", shard_size, "--quiet"]):
        p = run(*argv)
        assert p.returncode == 0, p.stderr
    shutil.rmtree(raw)
    return out


def same(test, a, b):
    """Every frame's window (k=3) and every utterance of a equal b's."""
    test.assertEqual(len(a), len(b))
    frames = np.arange(len(a), dtype=np.uint64)
    xa, ya = a.gather(frames, 3, labels=True)
    xb, yb = b.gather(frames, 3, labels=True)
    test.assertTrue(np.array_equal(xa, xb))
    test.assertTrue(np.array_equal(ya, yb))
    for u in range(a.num_utterances):
        ia, fa, la = a.utterance(u)
        ib, fb, lb = b.utterance(u)
        test.assertEqual(ia, ib)
        test.assertTrue(np.array_equal(fa, fb) and np.array_equal(la, lb))


class Nginx:
    """nginx serving root on 127.0.0.1, its access log readable."""

    def __init__(self, root, limit_rate=None):
        """limit_rate (nginx's, e.g. "2m"): each response sent at most that
        many bytes a second."""
        self.dir = tempfile.mkdtemp(prefix="nginx-", dir=TMP)
        os.chmod(self.dir, 0o755)  # its workers keep uploads' bodies below it
        self.port = free_port()
        self.log = os.path.join(self.dir, "access.log")
        conf = os.path.join(self.dir, "nginx.conf")
        temp = " ".join(f"{k}_temp_path {self.dir}/{k};" for k in
                        ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        with open(conf, "w") as f:
            f.write(f"daemon off; worker_processes 1; pid {self.dir}/nginx.pid;\n"
                    f"error_log {self.dir}/error.log;\n"
                    "events { worker_connections 256; }\n"
                    # nginx's combined format, when each request ended and how long it
                    # took, and its connection's serial number and requests so far
                    "http { log_format timed '$remote_addr - $remote_user [$time_local] "
                    "\"$request\" $status $body_bytes_sent \"$http_referer\" "
                    "\"$http_user_agent\" $msec $request_time $connection "
                    "$connection_requests';\n"
                    f"  access_log {self.log} timed; client_max_body_size 0; {temp}\n"
                    f"  server {{ listen 127.0.0.1:{self.port}; root {root};\n"
                    + (f"    limit_rate {limit_rate};\n" if limit_rate else "") +
                    "    location /up/ { dav_methods PUT; create_full_put_path on; } } }\n")
        self.p = subprocess.Popen([shutil.which("nginx"), "-c", conf, "-p", self.dir],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nginx did not start: " + self.p.stderr.read().decode())

    def url(self, path):
        return f"http://127.0.0.1:{self.port}/{path}"

    def _lines(self):
        """The access log, once it has stopped growing: nginx writes a
        request's line as it finishes it, which may be just after the
        client has had its answer."""
        last, same_for = None, 0
        for _ in range(60):
            with open(self.log) as f:
                now = f.readlines()
            same_for = same_for + 1 if now == last else 0
            if same_for == 3:  # unchanged for 150 ms
                break
            last = now
            time.sleep(0.05)
        return now

    def requests(self):
        """(path, status, bytes) of every request so far."""
        out = []
        for line in self._lines():
            m = re.search(r'"GET (\S+) HTTP/[0-9.]+" (\d+) (\d+)', line)
            if m:
                out.append((m.group(1), int(m.group(2)), int(m.group(3))))
        return out

    def timings(self):
        """(path, start, end) of every GET so far, in seconds since the
        epoch (nginx's $msec, when the answer's last byte went, less its
        $request_time)."""
        out = []
        for line in self._lines():
            m = re.search(r'"GET (\S+) HTTP/[0-9.]+" \d+ .* ([0-9.]+) ([0-9.]+) \d+ \d+$', line)
            if m:
                end = float(m.group(2))
                out.append((m.group(1), end - float(m.group(3)), end))
        return out

    def connections(self):
        """(path, connection) of every GET so far: nginx's serial number of
        the connection that carried it."""
        return [(m.group(1), int(m.group(2))) for m in
                (re.search(r'"GET (\S+) HTTP/.* (\d+) \d+$', line) for line in self._lines()) if m]

    def puts(self):
        """The paths of every PUT so far, in order."""
        return [m.group(1) for m in (re.search(r'"PUT (\S+) HTTP', line)
                                     for line in self._lines()) if m]

    def stop(self):
        self.p.terminate()
        self.p.wait()


@unittest.skipIf(shutil.which("nginx") is None, "nginx is not installed (apt-get install nginx)")
class ThroughNginx(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.www = os.path.join(TMP, "www")
        os.makedirs(os.path.join(cls.www, "up"), exist_ok=True)
        os.chmod(cls.www, 0o755)
        os.chmod(os.path.join(cls.www, "up"), 0o777)  # nginx's workers write there
        cls.a = make("a", 40, 3)
        shutil.copytree(cls.a, os.path.join(cls.www, "a"))
        cls.ng = Nginx(cls.www)

    @classmethod
    def tearDownClass(cls):
        cls.ng.stop()

    def cache(self, name):
        return os.path.join(TMP, "cache-" + name)

    def test_served_values_equal_the_local_dataset(self):
        with ctxshard.open(self.ng.url("a"), cache=self.cache("exact")) as r, \
                ctxshard.open(self.a) as l:
            self.assertGreater(r.num_shards, 3)  # several shards, fetched four at a time
            same(self, r, l)
            self.assertEqual(r.identity, l.identity)
            self.assertEqual(r.path, self.ng.url("a"))
        # the command reads it from the cache: nothing downloaded again
        before = self.ng.requests()
        p = run("verify", self.ng.url("a"), "--cache", self.cache("exact"))
        self.assertEqual(p.returncode, 0, p.stderr)
        again = self.ng.requests()[len(before):]
        self.assertEqual([r[0] for r in again], ["/a/manifest.cxs"])

    def test_loaders_take_the_url(self):
        """Loader and UtteranceLoader given the URL and cache=: the batches
        of the local dataset, in the same order."""
        try:
            import ctxshard.torch as cxt
        except ImportError:
            self.skipTest("torch not installed")
        cache = self.cache("loaders")
        remote = list(cxt.Loader(self.ng.url("a"), 3, 256, seed=5, cache=cache, prefetch=False))
        local = list(cxt.Loader(self.a, 3, 256, seed=5, prefetch=False))
        self.assertEqual(len(remote), len(local))
        for (xr, yr), (xl, yl) in zip(remote, local):
            self.assertTrue(bool((xr == xl).all()) and bool((yr == yl).all()))
        ur = [b[0] for b in cxt.UtteranceLoader(self.ng.url("a"), 6000, seed=2, cache=cache)]
        ul = [b[0] for b in cxt.UtteranceLoader(self.a, 6000, seed=2)]
        self.assertEqual(len(ur), len(ul))
        self.assertTrue(all(a.shape == b.shape and bool((a == b).all())
                            for a, b in zip(ur, ul)))
        with ctxshard.open(self.a) as ds, self.assertRaisesRegex(ValueError, "cache= applies"):
            cxt.Loader(ds, 3, 256, cache=cache)

    def test_open_again_while_it_is_open(self):
        """A second open of a URL while the first is open -- in the same
        process, and in another while this one holds it -- opens at once
        (it waited for the first to close: forever in one process)."""
        cache = self.cache("twice")
        code = ("import sys, ctxshard\n"
                "a = ctxshard.open(sys.argv[1], cache=sys.argv[2])\n"
                "b = ctxshard.open(sys.argv[1], cache=sys.argv[2])\n"
                "assert len(a) == len(b)\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
        p = subprocess.run([sys.executable, "-c", code, self.ng.url("a"), cache], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        with ctxshard.open(self.ng.url("a"), cache=cache):
            p = subprocess.run([EXE, "info", self.ng.url("a"), "--cache", cache],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)

    def test_a_file_gone_from_the_cache_is_fetched_again(self):
        """A complete entry that lost a file (removed by hand, an eviction
        killed half-way) is fetched again, not refused at every open."""
        cache = self.cache("lost")
        with ctxshard.open(self.ng.url("a"), cache=cache) as r:
            entry = r.cached_at
        os.unlink(os.path.join(entry, "shard-000001.cxs"))
        before = len(self.ng.requests())
        with ctxshard.open(self.ng.url("a"), cache=cache) as r, ctxshard.open(self.a) as l:
            same(self, r, l)
        got = [x[0] for x in self.ng.requests()[before:]]
        self.assertIn("/a/shard-000001.cxs", got)
        # and the same dataset under another spelling of its URL is the same entry
        with ctxshard.open(self.ng.url("a/"), cache=cache), \
                ctxshard.open(self.ng.url("a").replace("/a", "//a"), cache=cache):
            pass
        self.assertEqual(len(ctxshard.cache_entries(cache)), 1)
        with self.assertRaisesRegex(ValueError, "a query or a fragment"):
            ctxshard.open(self.ng.url("a") + "?X-Amz-Signature=abc", cache=cache)

    def test_two_processes_download_each_file_once(self):
        cache = self.cache("shared")
        before = len(self.ng.requests())
        code = ("import sys, ctxshard; ds = ctxshard.open(sys.argv[1], cache=sys.argv[2]); "
                "print(len(ds))")
        env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
        ps = [subprocess.Popen([sys.executable, "-c", code, self.ng.url("a"), cache], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
        outs = [p.communicate() for p in ps]
        for p, (out, err) in zip(ps, outs):
            self.assertEqual(p.returncode, 0, err)
        self.assertEqual(outs[0][0], outs[1][0])
        got = collections.Counter(r[0] for r in self.ng.requests()[before:])
        shards = sorted(f for f in os.listdir(self.a) if f.startswith("shard-"))
        self.assertEqual({f"/a/{s}": 1 for s in shards},
                         {k: v for k, v in got.items() if "shard-" in k})
        self.assertEqual(got["/a/manifest.cxs"], 2)  # each open asks which dataset it is

    def test_packed_again_at_the_same_url_is_another_entry(self):
        cache = self.cache("repack")
        site = os.path.join(self.www, "moving")
        shutil.copytree(self.a, site)
        with ctxshard.open(self.ng.url("moving"), cache=cache) as r:
            first = r.identity
        b = make("b", 30, 9)
        shutil.rmtree(site)
        shutil.copytree(b, site)
        with ctxshard.open(self.ng.url("moving"), cache=cache) as r, ctxshard.open(b) as l:
            self.assertNotEqual(r.identity, first)
            same(self, r, l)
        p = run("cache", "ls", "--json", "--cache", cache)
        self.assertEqual(p.returncode, 0, p.stderr)
        entries = json.loads(p.stdout)["datasets"]
        self.assertEqual(len(entries), 2)
        self.assertEqual({e["url"] for e in entries}, {self.ng.url("moving")})
        shutil.rmtree(site)

    def test_budget_evicts_least_recently_used_but_never_what_is_open(self):
        cache = self.cache("budget")
        size = sum(os.path.getsize(os.path.join(self.a, f)) for f in os.listdir(self.a))
        for n in ("x", "y"):
            if not os.path.exists(os.path.join(self.www, n)):
                shutil.copytree(self.a if n == "x" else make("c", 40, 5),
                                os.path.join(self.www, n))
        limit = int(size * 1.6)  # one dataset fits, not two
        with ctxshard.open(self.ng.url("x"), cache=cache, cache_limit=limit):
            # x is open: y cannot make room by evicting it
            with self.assertRaisesRegex(OSError, "held by datasets open now"):
                ctxshard.open(self.ng.url("y"), cache=cache, cache_limit=limit)
        # closed now: y evicts it
        ctxshard.open(self.ng.url("y"), cache=cache, cache_limit=limit).close()
        p = run("cache", "ls", "--json", "--cache", cache)
        entries = json.loads(p.stdout)["datasets"]
        self.assertEqual([e["url"] for e in entries], [self.ng.url("y")])
        self.assertLessEqual(json.loads(p.stdout)["bytes"], limit)
        # a dataset larger than the whole budget is refused before any download
        before = len(self.ng.requests())
        with self.assertRaisesRegex(OSError, "more than the cache limit"):
            ctxshard.open(self.ng.url("x"), cache=cache, cache_limit=size // 2)
        self.assertEqual([r[0] for r in self.ng.requests()[before:]], ["/x/manifest.cxs"])
        # the command: prune to a size, clear
        p = run("cache", "prune", "--cache-limit", "1", "--cache", cache)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run("cache", "--json", "--cache", cache)
        self.assertEqual(json.loads(p.stdout)["datasets"], [])

    def test_push_uploads_the_manifest_last(self):
        """ctxshard push OUT URL to nginx's WebDAV: the shards, then the
        manifest; the dataset read back from the URL is the local one; a
        damaged dataset is not uploaded."""
        p = run("push", self.a, self.ng.url("up/a"), "--quiet")
        self.assertEqual(p.returncode, 0, p.stderr)
        puts = [r for r in self.ng.puts() if r.startswith("/up/a/")]
        shards = sorted(f for f in os.listdir(self.a) if f.startswith("shard-"))
        self.assertEqual(sorted(puts[:-1]), [f"/up/a/{s}" for s in shards])
        self.assertEqual(puts[-1], "/up/a/manifest.cxs")
        with ctxshard.open(self.ng.url("up/a"), cache=self.cache("pushed")) as r, \
                ctxshard.open(self.a) as l:
            same(self, r, l)
        bad = os.path.join(TMP, "damaged")
        shutil.copytree(self.a, bad)
        shard = os.path.join(bad, shards[1])
        with open(shard, "r+b") as f:
            f.seek(os.path.getsize(shard) - 100)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 1]))
        before = len(self.ng.puts())
        p = run("push", bad, self.ng.url("up/bad"), "--quiet")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("not uploaded, it fails its checks", p.stderr)
        self.assertEqual(len(self.ng.puts()), before)
        # a server that takes no PUT says so
        p = run("push", self.a, self.ng.url("readonly/a"), "--quiet")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("takes no upload there", p.stderr)

    def test_missing_dataset_names_the_url(self):
        p = run("info", self.ng.url("nothing-here"), "--cache", self.cache("missing"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(self.ng.url("nothing-here") + "/manifest.cxs: HTTP 404", p.stderr)
        self.assertIn("names the directory that holds manifest.cxs", p.stderr)


class Misbehaving(http.server.BaseHTTPRequestHandler):
    """Serves files of `root` with ranges, misbehaving on shards as
    `mode` says: "short" (the first response to each shard ends halfway,
    its Content-Length promising more), "long" (more bytes than the range
    asked for), "die" (every shard response ends halfway and the server
    stops answering)."""
    root, mode, seen = None, None, None
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = os.path.join(self.root, self.path.lstrip("/"))
        if not os.path.isfile(path):
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = open(path, "rb").read()
        lo, hi = 0, len(data) - 1
        m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m:
            lo, hi = int(m.group(1)), int(m.group(2)) if m.group(2) else len(data) - 1
        body = data[lo:hi + 1]
        shard = "shard-" in self.path
        self.seen.append((self.path, self.headers.get("Range")))
        first = sum(1 for p, _ in self.seen if p == self.path) == 1
        if shard and self.mode == "long":
            body = data[lo:]  + b"\0" * 64  # past the range asked for
        if shard and self.mode == "norange" and not first:  # the rest asked for: all sent
            body, m = data, None
        self.send_response(206 if m else 200)
        self.send_header("Content-Length", str(len(body)))
        if m:
            self.send_header("Content-Range", f"bytes {lo}-{lo + len(body) - 1}/{len(data)}")
        self.end_headers()
        if shard and self.mode in ("slow", "crawl"):  # 64 KiB every 20 (200) ms
            for i in range(0, len(body), 65536):
                try:
                    self.wfile.write(body[i:i + 65536])
                    self.wfile.flush()
                except OSError:  # the client stopped
                    return
                time.sleep(0.02 if self.mode == "slow" else 0.2)
            return
        if shard and (self.mode == "die" or (self.mode in ("short", "norange") and first)):
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            if self.mode == "die":
                threading.Thread(target=self.server.shutdown).start()
            return
        self.wfile.write(body)


class BadServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a = make("bad", 20, 4, shard_size="128K")

    def serve(self, mode):
        handler = type("H", (Misbehaving,), {"root": os.path.dirname(self.a), "mode": mode,
                                             "seen": []})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        return srv, handler.seen, f"http://127.0.0.1:{srv.server_address[1]}/bad"

    def test_body_cut_short_is_resumed_and_exact(self):
        srv, seen, url = self.serve("short")
        try:
            with ctxshard.open(url, cache=os.path.join(TMP, "c-short")) as r, \
                    ctxshard.open(self.a) as l:
                same(self, r, l)
        finally:
            srv.shutdown()
        shards = [s for s in seen if "shard-" in s[0]]
        resumed = [r for p, r in shards if r and not r.startswith("bytes=0-")]
        self.assertGreater(len(resumed), 0, shards)  # the rest asked for, not all again

    def test_fetch_reports_progress_and_stops_when_asked(self):
        """ctxshard.fetch: progress as the bytes arrive; an exception in the
        callback stops the download (raised, what arrived kept); the next
        fetch downloads only the rest, and the copy is exact."""
        srv, seen, url = self.serve("slow")
        cache = os.path.join(TMP, "c-slow")
        calls = []

        def stop_soon(done, total):
            calls.append((done, total))
            if len(calls) == 3:
                raise KeyboardInterrupt

        try:
            with self.assertRaises(KeyboardInterrupt):
                ctxshard.fetch(url, cache=cache, progress=stop_soon)
            size = calls[0][1]
            self.assertTrue(all(t == size for _, t in calls))
            self.assertLess(calls[-1][0], size)
            more = []
            info = ctxshard.fetch(url, cache=cache, progress=lambda d, t: more.append(d))
        finally:
            srv.shutdown()
        self.assertFalse(info["cached"])
        self.assertEqual(info["dataset_bytes"], size)
        self.assertLess(info["bytes_fetched"], size)  # the rest only
        self.assertEqual(more, sorted(more))
        entries = ctxshard.cache_entries(cache)
        self.assertEqual([(e["url"], e["complete"]) for e in entries], [(url, True)])
        # the copy (the server is gone: opened by its directory) is the dataset
        with ctxshard.open(entries[0]["dir"]) as r, ctxshard.open(self.a) as l:
            same(self, r, l)

    def test_a_wait_for_another_process_download_can_be_stopped(self):
        """A process waiting for another of the node to finish downloading
        the dataset still sees Ctrl-C (its progress callback is asked every
        100 ms while it waits, with 0 bytes): it stops at once, not when
        the other is done."""
        srv, _, url = self.serve("crawl")
        cache = os.path.join(TMP, "c-wait")
        env = dict(os.environ, PYTHONPATH=os.path.join(SRC, "python"))
        other = subprocess.Popen([sys.executable, "-c", "import sys, ctxshard; "
                                  "ctxshard.fetch(sys.argv[1], cache=sys.argv[2])", url, cache],
                                 env=env, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):  # until the other is downloading (a .part in its entry)
                if any(f.endswith(".part") for _, _, fs in os.walk(cache) for f in fs):
                    break
                time.sleep(0.05)
            calls = []

            def stop_soon(done, total):
                calls.append(done)
                if len(calls) == 3:
                    raise KeyboardInterrupt

            t0 = time.monotonic()
            with self.assertRaises(KeyboardInterrupt):
                ctxshard.fetch(url, cache=cache, progress=stop_soon)
            self.assertLess(time.monotonic() - t0, 3)
            self.assertEqual(calls, [0, 0, 0])
            self.assertIsNone(other.poll())  # the other still downloads
        finally:
            other.kill()
            other.wait()
            srv.shutdown()

    def test_whole_file_for_a_range_is_refused_before_a_byte(self):
        """A body cut short, then a server that answers the request for the
        rest with the whole file (HTTP 200): refused before a byte is
        written, and the partial file dropped, never resumed from (its
        bytes were written at the wrong offset)."""
        srv, _, url = self.serve("norange")
        cache = os.path.join(TMP, "c-norange")
        try:
            with self.assertRaisesRegex(ctxshard.CtxshardError, "does not serve ranges"):
                ctxshard.open(url, cache=cache)
        finally:
            srv.shutdown()
        parts = [f for e in os.listdir(cache) if os.path.isdir(os.path.join(cache, e))
                 for f in os.listdir(os.path.join(cache, e)) if f.endswith(".part")]
        self.assertEqual(parts, [])

    def test_body_longer_than_asked_is_refused(self):
        srv, _, url = self.serve("long")
        cache = os.path.join(TMP, "c-long")
        try:
            with self.assertRaisesRegex(ctxshard.CtxshardError, "sent more than"):
                ctxshard.open(url, cache=cache)
        finally:
            srv.shutdown()
        p = run("cache", "--json", "--cache", cache)
        self.assertFalse(any(e["complete"] for e in json.loads(p.stdout)["datasets"]))

    def test_server_gone_mid_body_names_the_url(self):
        srv, _, url = self.serve("die")
        t0 = time.monotonic()
        with self.assertRaises(OSError) as cm:
            ctxshard.open(url, cache=os.path.join(TMP, "c-die"))
        self.assertLess(time.monotonic() - t0, 60)  # the retries end it: no hang
        msg = str(cm.exception)
        self.assertIn(url + "/shard-", msg)
        self.assertIn("after 3 attempts", msg)
        # nothing verified is left: a later open with the server back fetches what is missing
        srv2, _, url2 = self.serve("ok")
        try:
            with ctxshard.open(url2, cache=os.path.join(TMP, "c-die2")) as r, \
                    ctxshard.open(self.a) as l:
                same(self, r, l)
        finally:
            srv2.shutdown()


def npm_ready():
    return shutil.which("node") and os.path.isdir(os.path.join(NODE_DIR, "node_modules",
                                                               "s3rver"))


@unittest.skipIf(not npm_ready(), "node or tests/remote/node_modules missing "
                 "(npm install --prefix tests/remote)")
class ThroughS3(unittest.TestCase):
    KEY, SECRET = "AKIACTXSHARDTEST", "ctxshard/test/secret+key"

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="s3-", dir=TMP)
        cls.port = free_port()
        cls.p = subprocess.Popen(["node", os.path.join(NODE_DIR, "s3_server.js"), cls.dir,
                                  str(cls.port), cls.KEY, cls.SECRET], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True,
                                 env=dict(os.environ, NODE_PATH=os.path.join(NODE_DIR,
                                                                             "node_modules")))
        line = cls.p.stdout.readline()
        assert line.startswith("listening"), line + cls.p.stderr.read()
        cls.endpoint = f"http://127.0.0.1:{cls.port}"
        cls.a = make("s3a", 30, 6)
        # uploaded with curl, signing as any S3 client does
        sig = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{cls.KEY}:{cls.SECRET}",
               "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-sf", "-o", "/dev/null"]
        subprocess.run(["curl", *sig, "-X", "PUT", f"{cls.endpoint}/bucket"], check=True)
        for f in sorted(os.listdir(cls.a)):
            subprocess.run(["curl", *sig, "-T", os.path.join(cls.a, f),
                            f"{cls.endpoint}/bucket/sets/a/{f}"], check=True)

    @classmethod
    def tearDownClass(cls):
        cls.p.send_signal(signal.SIGTERM)
        cls.p.wait()

    def env(self, **kw):
        e = {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.KEY,
             "AWS_SECRET_ACCESS_KEY": self.SECRET, "AWS_REGION": "us-east-1"}
        e.update(kw)
        return {k: v for k, v in e.items() if v is not None}

    def test_signed_reads_are_exact(self):
        old = dict(os.environ)
        os.environ.update(self.env())
        try:
            with ctxshard.open("s3://bucket/sets/a", cache=os.path.join(TMP, "c-s3")) as r, \
                    ctxshard.open(self.a) as l:
                same(self, r, l)
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_streamed_block_order_is_exact(self):
        """A block Loader over s3:// streams (signed range requests for the
        metadata, then for each block) and serves the local dataset's
        batches."""
        import torch
        from ctxshard.torch import Loader
        old = dict(os.environ)
        os.environ.update(self.env())
        try:
            kw = dict(shuffle="block", memory="3M", seed=3, threads=2)
            rem = Loader("s3://bucket/sets/a", 3, 64, cache=os.path.join(TMP, "c-s3s"), **kw)
            self.assertTrue(rem.dataset.streamed)
            n = 0
            for (xa, ya), (xb, yb) in zip(Loader(self.a, 3, 64, **kw), rem):
                self.assertTrue(torch.equal(xa, xb) and torch.equal(ya, yb))
                n += 1
            self.assertGreater(n, 0)
            self.assertGreater(rem.dataset.bytes_fetched, 0)
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_push_then_read(self):
        """ctxshard.push to S3 (signed PutObjects), then the dataset read
        back through the cache; with a wrong secret the upload is refused
        and nothing is left that a reader would open (no manifest)."""
        old = dict(os.environ)
        os.environ.update(self.env())
        try:
            sent = ctxshard.push(self.a, "s3://bucket/pushed/a")
            self.assertEqual(sent, sum(os.path.getsize(os.path.join(self.a, f))
                                       for f in os.listdir(self.a)))
            with ctxshard.open("s3://bucket/pushed/a", cache=os.path.join(TMP, "c-s3p")) as r, \
                    ctxshard.open(self.a) as l:
                same(self, r, l)
            os.environ["AWS_SECRET_ACCESS_KEY"] = "wrong"
            with self.assertRaisesRegex(PermissionError, "SignatureDoesNotMatch"):
                ctxshard.push(self.a, "s3://bucket/refused/a")
            os.environ["AWS_SECRET_ACCESS_KEY"] = self.SECRET
            with self.assertRaises(FileNotFoundError):
                ctxshard.open("s3://bucket/refused/a", cache=os.path.join(TMP, "c-s3r"))
        finally:
            os.environ.clear()
            os.environ.update(old)

    def test_wrong_and_missing_credentials(self):
        p = run("info", "s3://bucket/sets/a", "--cache", os.path.join(TMP, "c-s3w"),
                env=self.env(AWS_SECRET_ACCESS_KEY="not-the-secret"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("s3://bucket/sets/a/manifest.cxs: HTTP 403 (SignatureDoesNotMatch)",
                      p.stderr)
        self.assertIn("AWS_SECRET_ACCESS_KEY", p.stderr)
        env = {k: v for k, v in os.environ.items()}
        env.update(self.env())
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            env.pop(k)
        p = subprocess.run([EXE, "info", "s3://bucket/sets/a", "--cache",
                            os.path.join(TMP, "c-s3n")], capture_output=True, text=True, env=env)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("HTTP 403 (AccessDenied)", p.stderr)
        self.assertIn("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", p.stderr)
        p = run("info", "s3://bucket/sets/a", "--cache", os.path.join(TMP, "c-s3k"),
                env=self.env(AWS_ACCESS_KEY_ID="AKIAUNKNOWN"))
        self.assertIn("HTTP 403 (InvalidAccessKeyId)", p.stderr)


if __name__ == "__main__":
    try:
        unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=2)
    finally:
        shutil.rmtree(TMP, ignore_errors=True)
