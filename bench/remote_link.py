"""Streamed block-order epochs over an emulated link and from the S3 server
of the tests (issue 48), against the local epoch, in one run (needs root).

The servers run in a network namespace of their own (nginx serving the
dataset's directory; the S3-compatible server of the tests,
tests/remote/s3_server.js, behind an nginx proxy that logs every request
and passes the signed Host header through, so the S3 server checks each
signature); the client runs in a second namespace.  The two are joined by
a link this script emulates:

  lo    no link: the client runs in the servers' namespace, on 127.0.0.1;
  RTT   (e.g. 20, 100: milliseconds) a pair of tun devices, one in each
        namespace, and a delay line between them (a child process of this
        script): it reads every IP packet the kernel sends out of one device
        and writes it into the other RTT/2 later, holding as many packets as
        come meanwhile (bytes in flight, not stop-and-wait); a tbf qdisc on
        each device's way out sets the rate (--rate, 1gbit).  The kernel
        here has no netem, hence the delay line; tun devices rather than a
        veth pair because a veth pair has no place between its ends where a
        process can hold packets.  The delay line runs real-time, so that
        a loaded machine delays it little.  The MTU is 64000 (a delay line
        in Python moves 2,000 packets a second, not 83,000 of 1,500
        bytes), so TCP's first window is 10 packets of 64 KB, not of
        1.4 KB: slow start reaches a window sooner than over a real path.

Each link is checked first: the round trip (TCP connects, median), and
the bulk rate of one curl transfer and of 4 in parallel, with the
namespaces' TCP buffers as they are and with them raised to hold a
bandwidth-delay product (what the delay line holds).

Then, in rounds, in alternating order, each run in a fresh process, the
page cache dropped before each: the epoch of the local copy (the frame
Loader, k=5, B=1024, shuffle="block"; the UtteranceLoader in block mode,
frame_budget 32768) at each --memory, and the same over each link from
each server, streamed through an empty cache limited below the dataset's
size (--cache-frac of it, raised to what the loader holds at once).
Reported, medians: the rate against min(the local epoch, the link's
bytes/s: the dataset's bytes at --rate) (target >= 0.8), the requests in
flight as the client sees them (over a link, the delay line's view; on
127.0.0.1 the server's log: each request from $msec - $request_time to
$msec; mean over the time any is open, and the most at once), the
connections used ($connection), bytes fetched per epoch over the feature
bytes (target <= 1.02), the time to the first batch (creation included)
and the process's CPU time per GB fetched.  The load (uptime) is printed
with every figure.

usage: sudo /usr/bin/python3 bench/remote_link.py [--build build] [--dir /tmp/linkbench]
           [--utts 3000] [--rounds 3] [--links lo,20,100] [--servers nginx,s3]
           [--loaders frame,utt] [--memory 16M,128M] [--cache-frac 0.5]
           [--rate 1gbit] [--max-seconds S] [--bulk-mb 256] [--quick] [--no-check]
           [--no-drop] [--json FILE]
(bench/README.md says more.)"""
import argparse
import collections
import fcntl
import json
import os
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
NS_C, NS_S = "cxsbench-client", "cxsbench-server"
IP_C, IP_S = "10.239.0.1", "10.239.0.2"
TUN_C, TUN_S = "cxsbench0", "cxsbench1"
PORT_NGINX, PORT_S3, PORT_PROXY = 8080, 9000, 8081
KEY, SECRET = "AKIACTXSHARDTEST", "ctxshard/test/secret+key"
MTU = 64000


def size(s):
    """'16M' -> bytes."""
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    if not m:
        sys.exit(f"remote_link.py: {s}: not a size (a number, K, M or G)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def sh(*cmd, ns=None, **kw):
    """A command, in namespace ns when given; its failure ends the run
    naming it."""
    argv = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if p.returncode:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# ---- the link -----------------------------------------------------------------

def tcp(pkt):
    """(source port, destination port, sequence number, flags, payload) of
    an IPv4 TCP packet, else None."""
    if len(pkt) < 40 or pkt[0] >> 4 != 4 or pkt[9] != 6:
        return None
    ihl = (pkt[0] & 15) * 4
    sport, dport, seq = struct.unpack_from("!HHI", pkt, ihl)
    return sport, dport, seq, pkt[ihl + 13], pkt[ihl + (pkt[ihl + 12] >> 4) * 4:]


class Watch:
    """The HTTP requests crossing the link, seen at the client's end: a
    request begins when its first packet enters the link, ends when the
    last byte of its answer (header + Content-Length, counted by sequence
    number so that a retransmission is not counted twice) leaves it plus
    the one-way delay."""

    def __init__(self):
        self.open, self.done = {}, []
        self.packets, self.late, self.latest = 0, 0.0, 0.0  # the delay line's own lateness
        self.window, self.in_window, self.peak = collections.deque(), 0, 0.0

    def up(self, now, pkt):
        t = tcp(pkt)
        if not t:
            return
        sport, dport, _, _, data = t
        # GET only: the answer to a HEAD has a Content-Length but no body
        if data[:4] == b"GET ":
            self.open[sport, dport] = [now, None, None]

    def down(self, now, pkt, delay):
        # the most bytes/s towards the client over 250 ms: the link's rate once
        # a transfer's window is open
        self.window.append((now, len(pkt)))
        self.in_window += len(pkt)
        while self.window[0][0] < now - 0.25:
            self.in_window -= self.window.popleft()[1]
        self.peak = max(self.peak, self.in_window / 0.25)
        t = tcp(pkt)
        if not t or not t[4]:
            return
        sport, dport, seq, _, data = t
        r = self.open.get((dport, sport))
        if not r:
            return
        if r[1] is None:
            head = data.find(b"\r\n\r\n")
            m = re.search(rb"\r\ncontent-length: *(\d+)", data[:max(head, 0)], re.I)
            if head < 0 or not m:
                return
            r[1], r[2] = seq, head + 4 + int(m.group(1))
        if (seq + len(data) - r[1]) % (1 << 32) >= r[2]:
            self.done.append((r[0], now + delay, r[2]))
            del self.open[dport, sport]


def delay_line(fds, ctl, reply, delay):
    """The child's loop: every packet read from one tun device (fds: the
    client's, the server's) is written into the other `delay` seconds
    later, in order.  Lines on ctl: a number sets a new delay; "stats"
    writes what Watch saw since the last "stats" to reply (a JSON line);
    ctl's end (EOF) ends the loop."""
    other = {fds[0]: fds[1], fds[1]: fds[0]}
    q = {f: collections.deque() for f in fds}
    watch = Watch()
    while True:
        heads = [q[f][0][0] for f in fds if q[f]]
        now = time.monotonic()
        ready, _, _ = select.select([*fds, ctl], [], [],
                                    max(0.0, min(heads) - now) if heads else None)
        now = time.monotonic()
        if ctl in ready:
            msg = os.read(ctl, 256)
            if not msg:
                return
            for word in msg.split():
                if word == b"stats":
                    out = json.dumps({"requests": watch.done, "packets": watch.packets,
                                      "late_mean": watch.late / max(watch.packets, 1),
                                      "late_max": watch.latest, "peak": watch.peak})
                    os.write(reply, out.encode() + b"\n")
                    watch = Watch()
                else:
                    delay = float(word)
        for f in fds:
            if f in ready:
                while True:
                    try:
                        pkt = os.read(f, 65536)
                    except BlockingIOError:
                        break
                    if f == fds[0]:
                        watch.up(now, pkt)
                    else:
                        watch.down(now, pkt, delay)
                    q[f].append((now + delay, pkt))
            while q[f] and q[f][0][0] <= now:
                due, pkt = q[f].popleft()
                watch.packets += 1
                watch.late += now - due
                watch.latest = max(watch.latest, now - due)
                try:
                    os.write(other[f], pkt)
                except OSError:
                    pass  # a device going away at the end: the packet is lost, as on a link


class Link:
    """Two namespaces joined by two tun devices and the delay line."""

    def __init__(self, rate):
        self.rate, self.relay, self.ctl, self.bufs = rate, None, None, {}
        for ns in (NS_C, NS_S):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # an earlier run's
            sh("ip", "netns", "add", ns)
        fds = []
        for name in (TUN_C, TUN_S):
            fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
            # TUNSETIFF, IFF_TUN | IFF_NO_PI: IP packets, no header
            fcntl.ioctl(fd, 0x400454ca, struct.pack("16sH", name.encode(), 0x0001 | 0x1000))
            fds.append(fd)
        r, w = os.pipe()
        rr, rw = os.pipe()
        self.relay = os.fork()
        if self.relay == 0:
            os.close(w)
            os.close(rr)
            # the link is not the node's work: the delay line runs before the
            # loaders and the servers of this machine (real-time, else niced), so
            # that a loaded machine delays it as little as it can
            try:
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
            except OSError:
                os.nice(-10)
            try:
                delay_line(fds, r, rw, 0.0)
            finally:
                os._exit(0)
        os.close(r)
        os.close(rw)
        for fd in fds:
            os.close(fd)
        self.ctl, self.reply = w, os.fdopen(rr)
        # the devices move into their namespaces; the child's descriptors stay attached
        for ns, dev, me, peer in ((NS_C, TUN_C, IP_C, IP_S), (NS_S, TUN_S, IP_S, IP_C)):
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "link", "set", "lo", "up", ns=ns)
            sh("ip", "link", "set", dev, "mtu", str(MTU), "txqueuelen", "10000", "up", ns=ns)
            sh("ip", "addr", "add", me, "peer", peer, "dev", dev, ns=ns)

    def set_rtt(self, rtt_ms):
        """The delay line's RTT/2 each way, and tbf on each device's way out:
        the rate, a queue of a bandwidth-delay product (at least 1 MB)."""
        os.write(self.ctl, f"{rtt_ms / 2e3}\n".encode())
        bdp = int(rate_bytes(self.rate) * max(rtt_ms, 8) / 1e3)
        for ns, dev in ((NS_C, TUN_C), (NS_S, TUN_S)):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)
            sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate,
               "burst", str(4 * MTU), "limit", str(max(bdp, 1 << 20)), ns=ns)

    def tcp_buffers(self, big, rtt_ms):
        """The namespaces' TCP buffers (autotuning's most, tcp_rmem and
        tcp_wmem): as a new namespace has them, or raised to two
        bandwidth-delay products."""
        top = max(6 << 20, 2 * int(rate_bytes(self.rate) * rtt_ms / 1e3))
        for ns in (NS_C, NS_S):
            for k in ("tcp_rmem", "tcp_wmem"):
                if (ns, k) not in self.bufs:
                    self.bufs[ns, k] = sh("sysctl", "-n", f"net.ipv4.{k}", ns=ns).split()
                lo, mid, hi = self.bufs[ns, k]
                sh("sysctl", "-q", "-w", f"net.ipv4.{k}={lo} {mid} {top if big else hi}", ns=ns)

    def dropped(self):
        """Packets tbf has dropped on both devices since set_rtt."""
        n = 0
        for ns, dev in ((NS_C, TUN_C), (NS_S, TUN_S)):
            m = re.search(r"dropped (\d+)", sh("tc", "-s", "qdisc", "show", "dev", dev, ns=ns))
            n += int(m.group(1)) if m else 0
        return n

    def seen(self):
        """What the delay line saw since the last call: {"requests": [(start,
        end, bytes)], "packets", "late_mean", "late_max", "peak"} (seconds,
        bytes/s)."""
        os.write(self.ctl, b"stats\n")
        return json.loads(self.reply.readline())

    def close(self):
        if self.ctl is not None:
            os.close(self.ctl)  # the delay line ends at EOF
            os.waitpid(self.relay, 0)
            self.ctl = None
        for ns in (NS_C, NS_S):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def rate_bytes(rate):
    """tc's '1gbit' -> bytes a second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate)
    if not m:
        sys.exit(f"remote_link.py: --rate {rate}: not a rate like 1gbit or 500mbit")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


# ---- the servers --------------------------------------------------------------

class Servers:
    """nginx (the directory; and a logging proxy in front of the S3 server)
    and the S3 server, in the servers' namespace."""

    def __init__(self, work, www, with_s3):
        self.dir = os.path.join(work, "nginx")
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        os.chmod(self.dir, 0o755)
        self.log = os.path.join(self.dir, "access.log")
        temp = " ".join(f"{k}_temp_path {self.dir}/{k};" for k in
                        ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        proxy = "" if not with_s3 else (
            f"  upstream s3 {{ server 127.0.0.1:{PORT_S3}; keepalive 32; }}\n"
            f"  server {{ listen {PORT_PROXY}; location / {{ proxy_pass http://s3;\n"
            "    proxy_http_version 1.1; proxy_set_header Connection \"\";\n"
            "    proxy_set_header Host $http_host; proxy_buffering off;\n"
            "    proxy_request_buffering off; client_max_body_size 0; } }\n")
        with open(os.path.join(self.dir, "nginx.conf"), "w") as f:
            f.write(f"daemon off; worker_processes 2; pid {self.dir}/nginx.pid;\n"
                    f"error_log {self.dir}/error.log;\n"
                    "events { worker_connections 1024; }\n"
                    # which server, when each request ended, how long it took, on
                    # which connection, and its body's bytes
                    "http { log_format t '$server_port $msec $request_time $connection "
                    "$body_bytes_sent $status';\n"
                    f"  access_log {self.log} t; sendfile on; {temp}\n"
                    f"  server {{ listen {PORT_NGINX}; root {www}; }}\n{proxy}}}\n")
        self.procs = [subprocess.Popen(["ip", "netns", "exec", NS_S, "nginx", "-c",
                                        os.path.join(self.dir, "nginx.conf"), "-p", self.dir],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        if with_s3:
            store = os.path.join(work, "s3")
            shutil.rmtree(store, ignore_errors=True)
            os.makedirs(store)
            node = os.path.join(SRC, "tests", "remote")
            p = subprocess.Popen(["ip", "netns", "exec", NS_S, "node",
                                  os.path.join(node, "s3_server.js"), store, str(PORT_S3), KEY,
                                  SECRET], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=dict(os.environ, NODE_PATH=os.path.join(
                                     node, "node_modules")))
            self.procs.append(p)
            line = p.stdout.readline()
            if not line.startswith("listening"):
                raise RuntimeError(f"tests/remote/s3_server.js did not start: {line}"
                                   f"{p.stderr.read()}")
        for _ in range(100):
            if subprocess.run(["ip", "netns", "exec", NS_S, "curl", "-s", "-o", "/dev/null",
                               f"http://127.0.0.1:{PORT_NGINX}/"]).returncode == 0:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"nginx did not start: {self.dir}/error.log")
        self.since = os.path.getsize(self.log) if os.path.exists(self.log) else 0

    def upload(self, ds):
        """The dataset into the S3 server, signed as any S3 client signs:
        the bucket, then every file, the manifest last."""
        sig = ["curl", "-sf", "-o", "/dev/null", "--aws-sigv4", "aws:amz:us-east-1:s3",
               "--user", f"{KEY}:{SECRET}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
        base = f"http://127.0.0.1:{PORT_S3}/bucket"
        sh(*sig, "-X", "PUT", base, ns=NS_S)
        for f in sorted(os.listdir(ds), key=lambda f: f == "manifest.cxs"):
            sh(*sig, "-T", os.path.join(ds, f), f"{base}/ds/{f}", ns=NS_S)

    def requests(self):
        """The requests logged since the last call, once the log has
        stopped growing (nginx writes a line as a request ends): a list of
        (port, start, end, connection, bytes)."""
        last = -1
        for _ in range(40):
            now = os.path.getsize(self.log)
            if now == last:
                break
            last = now
            time.sleep(0.1)
        with open(self.log) as f:
            f.seek(self.since)
            text = f.read()
        self.since += len(text.encode())
        out = []
        for line in text.splitlines():
            port, end, took, conn, sent, _ = line.split()
            out.append((int(port), float(end) - float(took), float(end), int(conn), int(sent)))
        return out

    def close(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
            p.wait()


def flight(spans):
    """From the requests' (start, end): the mean number in flight while
    any is, the most at once, the time none is between the first start and
    the last end (seconds), and the most begun within one millisecond."""
    ev = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                key=lambda x: (x[0], -x[1]))  # a request that begins as another ends overlaps it
    n = most = 0
    busy = area = idle = 0.0
    t = ev[0][0] if ev else 0.0
    for when, d in ev:
        if n:
            busy += when - t
            area += n * (when - t)
        else:
            idle += when - t
        t = when
        n += d
        most = max(most, n)
    starts = sorted(s for s, _ in spans)
    together, j = 0, 0
    for i, st in enumerate(starts):
        while starts[j] < st - 0.001:
            j += 1
        together = max(together, i - j + 1)
    return (area / busy if busy else 0.0), most, idle, together


# ---- one epoch (a fresh process) ------------------------------------------------

def epoch(a):
    """One epoch of one loader; prints a JSON line."""
    os.environ.setdefault("CTXSHARD_LIB", os.path.join(a.build, "lib", "libctxshard.so"))
    sys.path.insert(0, os.path.join(SRC, "python"))
    from ctxshard.torch import Loader, UtteranceLoader
    kw = dict(cache=a.cache, cache_limit=a.cache_limit) if a.cache else {}
    t0, c0 = time.monotonic(), time.process_time()
    if a.loader == "frame":
        L = Loader(a.path, 5, 1024, shuffle="block", memory=a.memory, seed=1, **kw)
    else:
        L = UtteranceLoader(a.path, 32768, shuffle=True, memory=a.memory, seed=1, **kw)
    first, frames, batches = None, 0, 0
    for b in L:
        if first is None:
            first = time.monotonic() - t0
        frames += len(b[0]) if a.loader == "frame" else L.batch_info["frames"]
        batches += 1
        if a.max_seconds and time.monotonic() - t0 - first > a.max_seconds:
            break  # (the caller extrapolates from the share of the frames served)
    wall, cpu = time.monotonic() - t0, time.process_time() - c0
    print(json.dumps({"wall": wall, "cpu": cpu, "first": first, "frames": frames,
                      "batches": batches, "fetched": L.dataset.bytes_fetched,
                      "streamed": bool(L.dataset.streamed)}), flush=True)



# ---- the benchmark -------------------------------------------------------------

def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def probe(link, rtt, bulk):
    """The link measured: TCP connect (one round trip) 15 times, median;
    one curl of the bulk file, and 4 at once: bytes/s on average, and
    over a link the most in 250 ms (the delay line's count)."""
    host = IP_S if link is not None else "127.0.0.1"
    ns = NS_C if link is not None else NS_S
    code = ("import socket,statistics,sys,time\nt=[]\nfor _ in range(15):\n"
            " t0=time.monotonic();s=socket.create_connection((sys.argv[1],int(sys.argv[2])))\n"
            " t.append(time.monotonic()-t0);s.close();time.sleep(0.02)\n"
            "print(statistics.median(t)*1e3)")
    out = {"rtt_ms": float(sh(sys.executable, "-c", code, host, str(PORT_NGINX), ns=ns))}
    url = f"http://{host}:{PORT_NGINX}/{os.path.basename(bulk)}"
    late = []
    for bufs in ("default", "raised") if link is not None else ("default",):
        if link is not None:
            link.tcp_buffers(bufs == "raised", rtt)
        for k in (1, 4):
            if link is not None:
                link.seen()
            t0 = time.monotonic()
            ps = [subprocess.Popen(["ip", "netns", "exec", ns, "curl", "-sf", "-o", "/dev/null",
                                    url]) for _ in range(k)]
            if any(p.wait() for p in ps):
                raise RuntimeError(f"curl {url} failed")
            out[f"{bufs}_{k}"] = k * os.path.getsize(bulk) / (time.monotonic() - t0)
            if link is not None:
                seen = link.seen()
                out[f"{bufs}_{k}_peak"] = seen["peak"]
                late.append((seen["late_mean"], seen["late_max"]))
    if link is not None:
        link.tcp_buffers(False, rtt)
        out["late_mean_ms"] = statistics.mean(x for x, _ in late) * 1e3
        out["late_max_ms"] = max(x for _, x in late) * 1e3
        out["dropped"] = link.dropped()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = sys.argv[1:2] == ["epoch"]
    if sub:
        ap.add_argument("epoch")
        ap.add_argument("--path", required=True)
        ap.add_argument("--loader", required=True)
        ap.add_argument("--memory", required=True)
        ap.add_argument("--cache")
        ap.add_argument("--cache-limit")
        ap.add_argument("--build", default="build")
        ap.add_argument("--max-seconds", type=float)
        return epoch(ap.parse_args())
    ap.add_argument("--build", default="build")
    ap.add_argument("--dir", default="/tmp/linkbench")
    ap.add_argument("--utts", type=int, help="default 3000 (--quick 1250)")
    ap.add_argument("--rounds", type=int, help="default 3 (--quick 1)")
    ap.add_argument("--links", default="lo,20,100",
                    help="lo (127.0.0.1) and round trips in ms, comma-separated")
    ap.add_argument("--servers", default="nginx,s3")
    ap.add_argument("--loaders", default="frame,utt")
    ap.add_argument("--memory", help="the loaders' memory=, comma-separated (default 16M,128M; "
                    "--quick 16M)")
    ap.add_argument("--cache-frac", type=float, default=0.5,
                    help="the cache limit, a fraction of the dataset's bytes (raised to what "
                    "the loader holds at once)")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--max-seconds", type=float,
                    help="stop a run this long after its first batch and extrapolate its epoch "
                    "from the frames served (default: whole epochs)")
    ap.add_argument("--bulk-mb", type=int, help="the link check's file (default 256; --quick 32)")
    ap.add_argument("--quick", action="store_true",
                    help="--utts 800 --rounds 1 --memory 16M --max-seconds 8 --bulk-mb 32 "
                    "unless given: 5-6 minutes on a slow client")
    ap.add_argument("--no-check", action="store_true", help="skip the link's own measurement")
    ap.add_argument("--no-drop", action="store_true",
                    help="leave the page cache alone (figures then depend on what it holds)")
    ap.add_argument("--json", help="write every run's figures there")
    a = ap.parse_args()
    for k, full, quick in (("utts", 3000, 800), ("rounds", 3, 1), ("memory", "16M,128M", "16M"),
                           ("max_seconds", None, 8.0), ("bulk_mb", 256, 32)):
        if getattr(a, k) is None:
            setattr(a, k, quick if a.quick else full)
    if os.geteuid() != 0:
        sys.exit("remote_link.py: skipped: needs root (network namespaces, tun devices, "
                 "drop_caches)")
    if not os.path.exists("/dev/net/tun"):
        sys.exit("remote_link.py: skipped: no /dev/net/tun (the emulated link's devices)")
    servers = a.servers.split(",")
    if "s3" in servers and not (shutil.which("node") and os.path.isdir(
            os.path.join(SRC, "tests", "remote", "node_modules", "s3rver"))):
        print("remote_link.py: the S3 runs skipped: node or tests/remote/node_modules missing "
              "(npm install --prefix tests/remote)", flush=True)
        servers.remove("s3")
    links = [None if x == "lo" else float(x) for x in a.links.split(",")]
    exe = os.path.join(a.build, "tools", "ctxshard")
    a.dir = os.path.abspath(a.dir)
    www = os.path.join(a.dir, "www")
    ds = os.path.join(www, f"ds{a.utts}")
    os.makedirs(www, exist_ok=True)
    for d in (a.dir, www):
        os.chmod(d, 0o755)  # nginx's workers (another user) read below them
    if not os.path.exists(os.path.join(ds, "manifest.cxs")):
        raw = os.path.join(a.dir, "raw")
        shutil.rmtree(raw, ignore_errors=True)
        sh(exe, "synth", raw, "--utts", str(a.utts), "--quiet")
        sh(exe, "pack", raw, ds, "--quiet")
        shutil.rmtree(raw)
    bulk = os.path.join(www, f"bulk{a.bulk_mb}")
    if not os.path.exists(bulk):
        with open(bulk, "wb") as f:
            for _ in range(a.bulk_mb):
                f.write(os.urandom(1 << 20))
    info = json.loads(sh(exe, "info", ds, "--json"))
    dsbytes = sum(os.path.getsize(os.path.join(ds, f)) for f in os.listdir(ds))
    feat, frames = info["storage"]["feature_bytes"], info["frames"]
    meta = dsbytes - feat
    mems = a.memory.split(",")
    print(f"dataset {dsbytes / 1e6:.1f} MB ({frames} frames, {feat / 1e6:.1f} MB of features, "
          f"{meta / 1e6:.1f} MB of metadata); load {load()}", flush=True)

    def limit(loader, mem):
        """The cache limit of a streamed run: --cache-frac of the dataset,
        raised to what the loader holds at once (docs/guide.md: the frame
        loader memory x 10/9 with 8 blocks; the utterance loader two groups
        of blocks), plus the metadata and a margin of 8 MB; None when that
        is not below the dataset's size."""
        need = meta + (2.5 if loader == "utt" else 1.25) * size(mem) + (8 << 20)
        n = max(int(a.cache_frac * dsbytes), int(need))
        return n if n < dsbytes else None

    link = srv = None
    runs = collections.defaultdict(list)
    checks = {}
    try:
        link = Link(a.rate)
        srv = Servers(a.dir, www, "s3" in servers)
        if "s3" in servers:
            srv.upload(ds)
        cases = [(lk, s, ld, m) for lk in links for s in servers
                 for ld in a.loaders.split(",") for m in mems if limit(ld, m) is not None]
        for ld in a.loaders.split(","):
            for m in mems:
                if limit(ld, m) is None:
                    print(f"skipped: {ld} at {m}: a cache that holds what the loader holds at "
                          f"once is not below the dataset's size ({dsbytes / 1e6:.0f} MB): a "
                          "larger --utts", flush=True)
        locals_ = sorted({(ld, m) for _, _, ld, m in cases})
        for lk in links:
            if lk is not None:
                link.set_rtt(lk)
            if not a.no_check:
                c = checks[lk] = probe(link if lk is not None else None, lk or 0, bulk)
                srv.requests()
                print(f"link {'lo' if lk is None else f'{lk:g} ms'}: {checked(c)}   (load "
                      f"{load()})", flush=True)
        cache = os.path.join(a.dir, "cache")
        for r in range(a.rounds):
            order = [("local", None, ld, m) for ld, m in locals_] + cases
            if r % 2:
                order.reverse()
            for kind, s, ld, m in order:
                lk = None if kind == "local" else kind
                if kind != "local" and lk is not None:
                    link.set_rtt(lk)
                shutil.rmtree(cache, ignore_errors=True)
                if not a.no_drop:
                    drop_caches()
                cmd = [sys.executable, os.path.abspath(__file__), "epoch", "--loader", ld,
                       "--memory", m, "--build", os.path.abspath(a.build)]
                if a.max_seconds:
                    cmd += ["--max-seconds", str(a.max_seconds)]
                env = dict(os.environ)
                if kind == "local":
                    cmd += ["--path", ds]
                    argv, key = cmd, ("local", "", ld, m)
                else:
                    host = "127.0.0.1" if lk is None else IP_S
                    if s == "nginx":
                        cmd += ["--path", f"http://{host}:{PORT_NGINX}/{os.path.basename(ds)}"]
                    else:
                        cmd += ["--path", "s3://bucket/ds"]
                        env.update(AWS_ENDPOINT_URL=f"http://{host}:{PORT_PROXY}",
                                   AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET,
                                   AWS_REGION="us-east-1")
                    cmd += ["--cache", cache, "--cache-limit", str(limit(ld, m))]
                    argv = ["ip", "netns", "exec", NS_S if lk is None else NS_C] + cmd
                    key = ("lo" if lk is None else f"{lk:g} ms", s, ld, m)
                before = load()
                if lk is not None:
                    link.seen()  # (what crossed the link before this run)
                p = subprocess.run(argv, capture_output=True, text=True, env=env)
                if p.returncode:
                    raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}\n{p.stderr}")
                f = json.loads(p.stdout.strip().splitlines()[-1])
                # a run stopped by --max-seconds: its epoch extrapolated from the share of
                # the frames it served (the time to the first batch counted once)
                f["share"] = f["frames"] / frames
                f["wall"] = f["first"] + (f["wall"] - f["first"]) / f["share"]
                port = PORT_NGINX if s == "nginx" else PORT_PROXY
                mine = [q for q in srv.requests() if q[0] == port]
                if kind != "local":
                    # in flight as the client sees it: the delay line's view over a link;
                    # on 127.0.0.1 nginx's log (answers there take 0.000 s, so what it shows
                    # is the requests begun together)
                    seen = link.seen() if lk is not None else None
                    if seen:
                        f["late_ms"] = seen["late_mean"] * 1e3
                    spans = ([(b, e) for b, e, _ in seen["requests"]] if seen else
                             [(q[1], q[2]) for q in mine])
                    (f["mean_flight"], f["most_flight"], f["idle"],
                     f["together"]) = flight(spans)
                    f["requests"] = len(mine)
                    f["connections"] = len({q[3] for q in mine})
                    f["sent"] = sum(q[4] for q in mine)
                f["load"] = f"{before} / {load()}"
                runs[key].append(f)
                print(f"round {r + 1} {' '.join(key[:2]):16s} {ld:5s} {m:5s} {f['wall']:7.2f} s, "
                      f"first {f['first']:.2f} s, cpu {f['cpu']:.2f} s" +
                      (f", {f['requests']} requests on {f['connections']} connections, "
                       f"in flight {f['mean_flight']:.1f} (most {f['most_flight']}, "
                       f"{f['together']} begun in 1 ms; none for {f['idle']:.2f} s), "
                       + (f"fetched {f['fetched'] / feat:.3f} of the features" if f["share"] == 1
                          else f"extrapolated from {f['share']:.1%} of the epoch")
                       + (f", the delay line late by {f['late_ms']:.2f} ms on average"
                          if "late_ms" in f else "")
                       if kind != "local" else "") + f"   (load {f['load']})", flush=True)
    except KeyboardInterrupt:
        # the runs done so far still say something: their medians follow
        print("interrupted: the figures of the runs done", flush=True)
    finally:
        if srv:
            srv.close()
        if link:
            link.close()
    report(a, runs, checks, feat, dsbytes)


def checked(c):
    """A link's check, in words."""
    def rate(key):
        peak = f" (most in 250 ms {c[key + '_peak'] * 8e-6:.0f})" if key + "_peak" in c else ""
        return f"{c[key] * 8e-6:.0f} Mb/s{peak}"
    return f"connect {c['rtt_ms']:.1f} ms; " + "; ".join(
        f"{b} TCP buffers: one curl {rate(b + '_1')}, 4 at once {rate(b + '_4')}"
        for b in ("default", "raised") if f"{b}_1" in c) + (
        f"; the delay line late by {c['late_mean_ms']:.2f} ms on average (at most "
        f"{c['late_max_ms']:.1f}), tbf dropped {c['dropped']} packets" if "dropped" in c else "")


def report(a, runs, checks, feat, dsbytes):
    """The link checks, then the medians: each streamed case against its
    target, and the local epochs."""
    med = {k: {x: statistics.median(f[x] for f in v) for x in v[0]
               if isinstance(v[0][x], (int, float))} for k, v in runs.items()}
    loads = {k: [float(f["load"].split()[0]) for f in v] for k, v in runs.items()}
    link_bps = rate_bytes(a.rate)
    print(f"\nthe links (rate {a.rate}): round trip (TCP connect, median of 15); one curl "
          "of the bulk file, 4 at once (together); with the namespaces' TCP buffers, then "
          "raised")
    for lk, c in checks.items():
        print(f"  {'lo' if lk is None else f'{lk:g} ms'}: {checked(c)}")
    print(f"\nmedians of the rounds run (up to {a.rounds}); epoch s with (N%): extrapolated "
          "from the N% of the epoch served in --max-seconds after the first batch; in flight: "
          "mean while any is / most at once (on lo with nginx, whose answers take 0.000 s: the "
          "most begun within 1 ms); load: 1-minute average at the runs' starts")
    print("| link | server | loader | memory | epoch s | floor s | ratio (target >= 0.8) | "
          "in flight | connections | bytes / features (<= 1.02) | first batch s | CPU s/GB "
          "(local) | load |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for k, f in med.items():
        if k[0] == "local":
            continue
        loc = med.get(("local", "", k[2], k[3]))
        # the floor: the local epoch, or the dataset's bytes at the link's rate
        floor = max(loc["wall"] if loc else 0.0, dsbytes / link_bps if k[0] != "lo" else 0.0)
        ratio = floor / f["wall"]
        fl = (f"{f['mean_flight']:.1f} / {f['most_flight']:.0f}" if f["mean_flight"] else
              f"({f['together']:.0f} begun in 1 ms)")
        local_cpu = f" ({loc['cpu'] / (feat / 1e9):.2f})" if loc else ""
        part = f" ({f['share']:.1%})" if f["share"] < 1 else ""
        byt = "(partial)" if part else f"{f['fetched'] / feat:.3f}"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {f['wall']:.2f}{part} | {floor:.2f} | "
              f"{ratio:.2f}x{'' if ratio >= 0.8 else ' (not met)'} | {fl} | "
              f"{f['connections']:.0f} of {f['requests']:.0f} requests | "
              f"{byt} | {f['first']:.2f} | "
              f"{f['cpu'] / (f['sent'] / 1e9):.2f}{local_cpu} | "
              f"{min(loads[k]):.1f}-{max(loads[k]):.1f} |")
    for k, f in med.items():
        if k[0] == "local":
            print(f"local {k[2]} {k[3]}: {f['wall']:.2f} s, first batch {f['first']:.2f} s, "
                  f"{f['frames'] / f['wall'] / 1e6:.2f}M frames/s, load "
                  f"{min(loads[k]):.1f}-{max(loads[k]):.1f}")
    print(f"load now {load()}")
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"runs": {" ".join(k): v for k, v in runs.items()},
                       "checks": {str(k): v for k, v in checks.items()}}, out, indent=1)


if __name__ == "__main__":
    main()
