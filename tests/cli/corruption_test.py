"""Corruption matrix: one flipped byte at many positions of every part of
every file of a packed dataset (header, section table, each section,
padding) and truncation at many lengths.  verify reports every case naming
the file (and the section, for section bytes); open never crashes and
refuses everything it reads (all but FEATURES and LABELS payload bytes and
padding, which spec/format.md §8 leaves to verify, and the INDEX and IDS
of a format 1.3 shard, which it defers to the first use of each block: a
damaged INDEX is then refused by the gather of every window), its message
leading with the damaged file (diag.file); gather on whatever opens never
crashes.  A block sum that disagrees with its block while the section
checksum matches (a faulty writer's file) is refused before anything of
the block is served: by the open of a shard alone (its tables checked
whole) and by the open that copies FEATURES into huge pages.

usage: /usr/bin/python3 tests/cli/corruption_test.py BUILD/tools/ctxshard"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

EXE = os.path.abspath(sys.argv[1])
NAMES = {1: "SHARD_META", 2: "INDEX", 3: "IDS", 4: "FEATURES", 5: "LABELS", 8: "SEQUENCES",
         9: "BLOCKSUMS", 16: "DATASET_META", 17: "SHARD_TABLE", 18: "VOCAB", 19: "STATS",
         20: "SKIPPED"}
PAYLOAD = {4, 5}
DEFERRED = {2, 3, 8}  # with BLOCKSUMS (the packer's default): checked at first use


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
from make_golden import rehash, xxh3  # noqa: E402  (the vectors' faulty writer)


def run(*args):
    return subprocess.run([EXE, *map(str, args)], capture_output=True, text=True)


def layout(path):
    data = open(path, "rb").read()
    n = struct.unpack_from("<I", data, 24)[0]
    secs = []
    for i in range(n):
        t, _, off, ln, _ = struct.unpack_from("<IIQQQ", data, 64 + 32 * i)
        secs.append((t, off, ln))
    return data, n, secs


def spread(a, b, count):
    if b <= a:
        return []
    return sorted({a + (b - a - 1) * i // max(count - 1, 1) for i in range(count)})


def zstd_gather(tmp, raw, failures):
    """A damaged chunk of a compressed shard: gather refuses the windows
    that touch it, names the shard file (not the --out path), and writes
    nothing; windows elsewhere are still served."""
    zds = os.path.join(tmp, "zds")
    r = run("pack", raw, zds, "--shard-size", "400K", "--on-error", "skip", "--compress", "zstd",
            "--chunk-size", "4K", "--quiet")
    assert r.returncode == 0, r.stderr
    shard = os.path.join(zds, "shard-000001.cxs")
    data, _, secs = layout(shard)
    off, ln = [(o, n) for t, o, n in secs if t == 6][0]
    data = bytearray(data)
    data[off + ln // 2] ^= 0x40  # a chunk in the middle (the last ones hold only guard rows)
    open(shard, "wb").write(bytes(data))
    out = os.path.join(tmp, "zg.npy")
    g = run("gather", zds, "--context", 5, "--all", "--out", out)
    if g.returncode != 1:
        failures.append(f"gather over a damaged chunk: exit {g.returncode}: {g.stderr.strip()}")
    elif not g.stderr.startswith(f"ctxshard: {shard}: ") or "damaged compressed chunk" not in g.stderr:
        failures.append(f"gather over a damaged chunk: the message does not name {shard}: "
                        f"{g.stderr.strip()}")
    if os.path.exists(out):
        failures.append("gather over a damaged chunk left its output behind")
    g = run("gather", zds, "--context", 5, "--frames", "0-9", "--out", out)
    if g.returncode != 0 or not os.path.exists(out):
        failures.append(f"gather of undamaged windows failed: {g.stderr.strip()}")


def stale_sum_alone(tmp, ds, failures):
    """A shard opened alone checks its tables whole at open; a block sum of
    INDEX that disagrees with INDEX's bytes, whose section checksum matches
    (BLOCKSUMS's own checksum and the header made good, as a faulty writer
    would), is refused at open (spec 4.8, 8 step 8), not served."""
    path = os.path.join(tmp, "alone.cxs")
    data, n, secs = layout(os.path.join(ds, "shard-000000.cxs"))
    data = bytearray(data)
    i, b0 = [(i, off) for i, (t, off, ln) in enumerate(secs) if t == 9][0]
    count = struct.unpack_from("<I", data, b0)[0]
    entries = [struct.unpack_from("<IIQQ", data, b0 + 8 + 24 * e) for e in range(count)]
    first = [f for t, _, _, f in entries if t == 2][0]  # INDEX's block 0
    data[b0 + 8 + 24 * count + 8 * first] ^= 0x01
    struct.pack_into("<Q", data, 64 + 32 * i + 24, xxh3(data[b0:b0 + secs[i][2]]))
    struct.pack_into("<Q", data, 56, 0)
    struct.pack_into("<Q", data, 56, xxh3(data[:64 + 32 * n]))
    open(path, "wb").write(bytes(data))
    r = run("info", path)
    if r.returncode != 1 or "INDEX block 0 of 1" not in r.stderr or \
            "checksum mismatch" not in r.stderr:
        failures.append(f"a shard alone with a stale INDEX block sum: info exit {r.returncode}: "
                        f"{(r.stdout + r.stderr).strip()[-200:]}")


def stale_sum_copied(tmp, ds, failures):
    """A FEATURES block sum that disagrees with its block, every checksum
    made good (rehash): the first use of the block refuses it, and so does
    the open that copies FEATURES into huge pages and checks the copy
    against the section checksum (spec 4.8: the block sum wins)."""
    bad = os.path.join(tmp, "stale-feat")
    shutil.copytree(ds, bad)
    path = os.path.join(bad, "shard-000000.cxs")
    data, _, secs = layout(path)
    data = bytearray(data)
    b0 = [off for t, off, ln in secs if t == 9][0]
    count = struct.unpack_from("<I", data, b0)[0]
    entries = [struct.unpack_from("<IIQQ", data, b0 + 8 + 24 * e) for e in range(count)]
    first = [f for t, _, _, f in entries if t == 4][0]  # FEATURES's block 0
    data[b0 + 8 + 24 * count + 8 * first] ^= 0x01
    open(path, "wb").write(bytes(data))
    rehash(bad)
    g = run("gather", bad, "--context", 0, "--frames", 0, "--out", os.path.join(tmp, "s.npy"))
    if g.returncode != 1 or "FEATURES block 0" not in g.stderr:
        failures.append(f"a stale FEATURES block sum: gather exit {g.returncode}: "
                        f"{g.stderr.strip()[-200:]}")
    b = run("bench-read", bad, "--hugepages", "1G", "--batches", 2, "--batch", 16,
            "--context", 0)
    if b.returncode == 0 and "served from a copy in huge pages" in b.stdout:
        failures.append(f"a stale FEATURES block sum: served from a huge-page copy: "
                        f"{b.stdout.strip()[-300:]}")
    elif b.returncode != 0 and "FEATURES block 0" not in b.stderr:
        failures.append(f"a stale FEATURES block sum: bench-read --hugepages exit "
                        f"{b.returncode}: {b.stderr.strip()[-200:]}")


def main():
    tmp = tempfile.mkdtemp(prefix="ctxshard-corrupt-")
    failures, cases = [], {"flip": 0, "truncate": 0}
    try:
        raw, ds = os.path.join(tmp, "raw"), os.path.join(tmp, "ds")
        assert run("synth", raw, "--utts", 6, "--seed", 9, "--quiet").returncode == 0
        os.remove(os.path.join(raw, "transcript", sorted(os.listdir(os.path.join(raw, "mfcc")))[2]))
        r = run("pack", raw, ds, "--shard-size", "400K", "--on-error", "skip", "--quiet")
        assert r.returncode == 0, r.stderr
        files = sorted(os.listdir(ds))
        assert len(files) >= 3, files  # manifest and at least two shards

        def check(desc, path, pos, section):
            r_verify, r_open = run("verify", ds), run("info", ds)
            msg = r_verify.stderr
            if r_verify.returncode != 1:
                failures.append(f"{desc}: verify exit {r_verify.returncode}")
            elif path not in msg:
                failures.append(f"{desc}: verify message does not name {path}: {msg.strip()}")
            elif section is not None and NAMES[section] not in msg:
                failures.append(f"{desc}: verify message does not name {NAMES[section]}: {msg.strip()}")
            if r_open.returncode < 0 or r_open.returncode > 1:
                failures.append(f"{desc}: open crashed or failed oddly ({r_open.returncode})")
            elif r_open.returncode == 1 and not r_open.stderr.startswith(f"ctxshard: {path}: "):
                failures.append(f"{desc}: open's refusal does not lead with {path}: "
                                f"{r_open.stderr.strip()}")
            must_refuse = section is not None and section not in PAYLOAD | DEFERRED
            if must_refuse and r_open.returncode != 1:
                failures.append(f"{desc}: open accepted a damaged {NAMES[section]}")
            if r_open.returncode == 0:  # serve from it: never a crash
                g = run("gather", ds, "--context", 70, "--all", "--out", os.path.join(tmp, "g.npy"))
                if g.returncode < 0:
                    failures.append(f"{desc}: gather crashed ({g.returncode})")
                elif section == 2 and g.returncode != 1:
                    failures.append(f"{desc}: gather of every window served a damaged INDEX "
                                    f"(exit {g.returncode})")

        for name in files:
            path = os.path.join(ds, name)
            orig, n, secs = layout(path)
            positions = [(p, None, "header") for p in range(0, 64, 3)]
            positions += [(p, None, "section table") for p in spread(64, 64 + 32 * n, 24)]
            end = 64 + 32 * n
            for t, off, ln in secs:
                positions += [(p, t, NAMES[t]) for p in spread(off, off + ln, 16)]
                positions += [(p, None, "padding") for p in spread(end, off, 3)]
                end = off + ln
            positions += [(p, None, "padding") for p in spread(end, len(orig), 3)]
            for pos, section, what in positions:
                data = bytearray(orig)
                data[pos] ^= 0x40
                open(path, "wb").write(bytes(data))
                cases["flip"] += 1
                check(f"{name} byte {pos} ({what})", path, pos, section)
            for cut in spread(0, len(orig), 25):
                open(path, "wb").write(orig[:cut])
                cases["truncate"] += 1
                check(f"{name} cut to {cut} bytes", path, cut, None)
            open(path, "wb").write(orig)
        assert run("verify", ds).returncode == 0
        stale_sum_alone(tmp, ds, failures)
        stale_sum_copied(tmp, ds, failures)
        zstd_gather(tmp, raw, failures)
    finally:
        shutil.rmtree(tmp)
    print(f"{cases['flip']} flipped bytes and {cases['truncate']} truncations over "
          f"{len(files)} files; {len(failures)} failures")
    for f in failures[:40]:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
