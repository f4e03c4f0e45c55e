"""`ctxshard stats`: figures against the stored statistics and a numpy
reference, JSON, SVG charts that are well-formed and have content, the
HTML page, --compare warnings, --no-scan; and, when Chromium is installed,
the page rendered headless without console errors (else that part skips).

usage: /usr/bin/python3 tests/cli/stats_test.py BUILD/tools/ctxshard"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

import numpy as np

EXE = os.path.abspath(sys.argv[1])
SVG = "{http://www.w3.org/2000/svg}"


def run(*args):
    p = subprocess.run([EXE, *map(str, args)], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


class Stats(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ctxshard-stats-")
        t = cls.tmp
        assert run("synth", f"{t}/raw", "--utts", 30, "--seed", 3, "--quiet")[0] == 0
        assert run("synth", f"{t}/devraw", "--utts", 8, "--seed", 3, "--offset", 30, "--quiet")[0] == 0
        assert run("pack", f"{t}/raw", f"{t}/train", "--quiet")[0] == 0
        assert run("pack", f"{t}/devraw", f"{t}/dev", "--normalize", "utterance", "--quiet")[0] == 0
        # an all-zero frame, to be counted by the scan
        x = np.load(os.path.join(t, "raw", "mfcc", sorted(os.listdir(f"{t}/raw/mfcc"))[0]))
        cls.zero_raw = f"{t}/zraw"
        shutil.copytree(f"{t}/raw", cls.zero_raw)
        p = os.path.join(cls.zero_raw, "mfcc", sorted(os.listdir(f"{t}/raw/mfcc"))[0])
        x[5] = 0
        np.save(p, x)
        assert run("pack", cls.zero_raw, f"{t}/ztrain", "--quiet")[0] == 0

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_json_matches_stored_and_reference(self):
        rc, out, err = run("stats", f"{self.tmp}/train", "--json")
        self.assertEqual(rc, 0, err)
        j = json.loads(out)
        _, info, _ = run("info", f"{self.tmp}/train", "--json")
        info = json.loads(info)
        counts = {l["symbol"]: l["frames"] for l in j["labels"]}
        self.assertEqual([counts[s] for s in info["vocab"]], info["stats"]["label_counts"])
        frames = [l["frames"] for l in j["labels"]]
        self.assertEqual(frames, sorted(frames, reverse=True))
        present = [f for f in frames if f]
        self.assertLess(abs(j["imbalance"] / (max(present) / min(present)) - 1), 1e-5)
        w = {l["symbol"]: l["weight"] for l in j["labels"] if l["frames"]}
        self.assertAlmostEqual(sum(w[s] * counts[s] for s in w) / info["frames"], 1.0, places=6)
        lens = [np.load(os.path.join(self.tmp, "raw", "mfcc", n)).shape[0]
                for n in os.listdir(os.path.join(self.tmp, "raw", "mfcc"))]
        self.assertEqual(sum(j["lengths"]["histogram"]), len(lens))
        self.assertEqual(j["lengths"]["median"], float(np.median(lens)))
        self.assertEqual((j["lengths"]["min"], j["lengths"]["max"]), (min(lens), max(lens)))
        allx = np.concatenate([np.load(os.path.join(self.tmp, "raw", "mfcc", n))
                               for n in os.listdir(os.path.join(self.tmp, "raw", "mfcc"))])
        self.assertTrue(np.allclose([d["min"] for d in j["dims"]], allx.min(0)))
        self.assertTrue(np.allclose([d["std"] for d in j["dims"]], allx.astype(np.float64).std(0), rtol=1e-6))
        self.assertTrue(j["dims"][0]["unnormalised"])  # synth's energy-like dimension 0
        self.assertEqual(j["scan"], {"nonfinite": 0, "zero_frames": 0})
        self.assertTrue(any("class imbalance" in s for s in j["warnings"]))
        self.assertTrue(any("look unnormalised" in s for s in j["warnings"]))

    def test_median_of_lengths_spanning_millions(self):
        # stats finds the median by counting lengths in ranges, pass after
        # pass over INDEX (no copy of the lengths): lengths spanning more
        # than 2^20 values take a second pass; odd and even counts
        for lens in ([1, 2, 1_048_579, 1_048_581, 2_500_000],
                     [1, 2, 7, 1_048_579, 1_048_581, 2_500_000],
                     [5, 5, 5, 5], [3]):
            raw = os.path.join(self.tmp, f"long{len(lens)}")
            os.makedirs(os.path.join(raw, "mfcc"))
            for i, n in enumerate(lens):
                np.save(os.path.join(raw, "mfcc", f"u{i}.npy"),
                        np.full((n, 1), i + 1, dtype=np.float32))
            rc, _, err = run("pack", raw, raw + "-out", "--guard", 1, "--quiet")
            self.assertEqual(rc, 0, err)
            rc, out, err = run("stats", raw + "-out", "--json", "--no-scan")
            self.assertEqual(rc, 0, err)
            j = json.loads(out)["lengths"]
            self.assertEqual(j["median"], float(np.median(lens)), lens)
            self.assertEqual((j["min"], j["max"]), (min(lens), max(lens)))
            self.assertEqual(sum(j["histogram"]), len(lens))

    def test_damaged_index_refused(self):
        # a flipped INDEX bit (format 1.3 checks INDEX blocks at first use):
        # stats fails and names the dataset, instead of reporting lengths
        # read from the damaged bytes (it once printed median 0)
        out = os.path.join(self.tmp, "dmg")
        shutil.copytree(f"{self.tmp}/train", out)
        shard = os.path.join(out, "shard-000000.cxs")
        with open(shard, "r+b") as f:
            head = f.read(4096)
            for i in range(16):  # the section table: type, flags, offset, length, checksum
                t, _, off, length, _ = struct.unpack_from("<IIQQQ", head, 64 + 32 * i)
                if t == 2:  # INDEX
                    break
            else:
                self.fail("no INDEX section")
            pos = off + 8 * (length // 16) + 1
            f.seek(pos)
            x = f.read(1)
            f.seek(pos)
            f.write(bytes([x[0] ^ 0x10]))
        rc, out_, err = run("stats", out, "--json", "--no-scan")
        self.assertNotEqual(rc, 0, out_)
        self.assertIn(out, err)
        self.assertIn("checksum mismatch", err)
        self.assertEqual(out_, "")

    def test_scan_counts_zero_frames_and_no_scan(self):
        rc, out, _ = run("stats", f"{self.tmp}/ztrain", "--json")
        self.assertEqual(json.loads(out)["scan"]["zero_frames"], 1)
        rc, out, _ = run("stats", f"{self.tmp}/ztrain", "--json", "--no-scan")
        self.assertIsNone(json.loads(out)["scan"])

    def test_text(self):
        rc, out, _ = run("stats", f"{self.tmp}/train")
        self.assertEqual(rc, 0)
        for needle in ("utterance lengths: min", "labels, most frequent first (imbalance",
                       "per-dimension statistics", "scan: 0 NaN/Inf values", "warnings:"):
            self.assertIn(needle, out)

    def svgs(self, d):
        out = {}
        for name in sorted(os.listdir(d)):
            root = ET.parse(os.path.join(d, name)).getroot()
            self.assertEqual(root.tag, SVG + "svg")
            texts = [t.text for t in root.iter(SVG + "text") if t.text]
            self.assertGreater(len(texts), 5, name)  # title, ticks, axis labels
            out[name] = (root, texts)
        return out

    def test_svg_charts_have_axes_and_content(self):
        d = os.path.join(self.tmp, "svg")
        rc, _, err = run("stats", f"{self.tmp}/train", "--svg", d, "--examples", 2)
        self.assertEqual(rc, 0, err)
        charts = self.svgs(d)
        self.assertEqual(sorted(charts), ["dims.svg", "heatmap-0.svg", "heatmap-1.svg",
                                          "labels.svg", "lengths.svg"])
        root, texts = charts["labels.svg"]
        bars = [r for r in root.iter(SVG + "rect") if r.get("class") == "bar"]
        self.assertEqual(len(bars), 42)
        self.assertIn("[SIL]", texts)
        self.assertTrue(any(t.endswith("%") for t in texts))  # percent ticks
        root, texts = charts["lengths.svg"]
        self.assertIn("frames per utterance", texts)
        self.assertTrue(sum(float(r.get("height")) > 0 for r in root.iter(SVG + "rect")
                            if r.get("class") == "bar") >= 3)
        root, texts = charts["dims.svg"]
        self.assertIn("0*", texts)
        root, texts = charts["heatmap-0.svg"]
        self.assertGreater(len(list(root.iter(SVG + "rect"))), 28 * 100)
        self.assertIn("[SIL]", texts)  # the label strip

    def test_html_and_compare(self):
        html = os.path.join(self.tmp, "cmp.html")
        rc, out, err = run("stats", "--compare", f"{self.tmp}/train", f"{self.tmp}/dev",
                           "--html", html)
        self.assertEqual(rc, 0, err)
        self.assertIn("dimension 0: mean", out)   # dev is normalised, train is not
        self.assertIn("warnings:", out)
        # Side by side: one row per figure, A's column then B's, not one report after the other.
        self.assertIn(f"A: {self.tmp}/train\nB: {self.tmp}/dev\n", out)
        _, info_a, _ = run("info", f"{self.tmp}/train", "--json")
        _, info_b, _ = run("info", f"{self.tmp}/dev", "--json")
        ua, ub = json.loads(info_a)["utterances"], json.loads(info_b)["utterances"]
        self.assertRegex(out, rf"(?m)^  utterances +{ua} +{ub}$")
        self.assertRegex(out, r"(?m)^  symbol +A frames +share +weight +B frames +share +weight$")
        self.assertRegex(out, r"(?m)^  \[SIL\] +\d+ +[\d.]+% +[\d.]+ +\d+ +[\d.]+% +[\d.]+$")
        self.assertRegex(out, r"(?m)^  +0 +\S+ +\S+ +\S+ +\S+$")  # dim 0: A mean, std, B's
        self.assertEqual(out.count("utterance lengths"), 1)
        self.assertNotIn("=====", out)
        self.assertIn(f"wrote {html} (", out)  # says where the page went
        with open(html, encoding="utf-8") as f:
            page = f.read()
        self.assertEqual(page.count("<svg"), 3 + 6)  # 3 side-by-side charts, 3 examples each
        self.assertIn("dimension 0: mean", page)
        rc, out, _ = run("stats", "--compare", f"{self.tmp}/train", f"{self.tmp}/train", "--json",
                         "--no-scan")
        self.assertEqual(json.loads(out)["warnings"], [])
        rc, _, err = run("stats", "--compare", f"{self.tmp}/train")
        self.assertEqual(rc, 2)
        self.assertIn("--compare expects two datasets", err)

    def test_page_renders_in_chromium(self):
        chromium = shutil.which("chromium") or shutil.which("chromium-browser")
        if not chromium:
            self.skipTest("chromium is not installed (optional: apt-get install chromium)")
        html = os.path.join(self.tmp, "page.html")
        self.assertEqual(run("stats", f"{self.tmp}/train", "--html", html)[0], 0)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={self.tmp}/chromium", "--enable-logging=stderr", "--v=0"]
        png = os.path.join(self.tmp, "page.png")
        p = subprocess.run([chromium, *flags, "--window-size=1300,3000", f"--screenshot={png}",
                            "file://" + html], capture_output=True, text=True, timeout=120)
        self.assertTrue(os.path.getsize(png) > 50000, "the screenshot is (nearly) empty")
        self.assertNotIn("Uncaught", p.stderr)
        dom = subprocess.run([chromium, *flags, "--dump-dom", "file://" + html],
                             capture_output=True, text=True, timeout=120).stdout
        self.assertEqual(dom.count("<svg"), 3 + 3)
        self.assertEqual(dom.count('class="bar"') >= 42 + 28, True)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=1)
