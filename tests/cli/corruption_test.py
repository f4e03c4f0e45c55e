"""Corruption matrix: one flipped byte at many positions of every part of
every file of a packed dataset (header, section table, each section,
padding) and truncation at many lengths.  verify reports every case naming
the file (and the section, for section bytes); open never crashes and
refuses everything it reads (all but FEATURES and LABELS payload bytes and
padding, which spec/format.md §8 leaves to verify, and the INDEX and IDS
of a format 1.3 shard, which it defers to the first use of each block: a
damaged INDEX is then refused by the gather of every window), its message
leading with the damaged file (diag.file); gather on whatever opens never
crashes.

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
