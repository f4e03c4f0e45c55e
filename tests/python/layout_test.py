"""The C-Python contract: every ctypes structure in ctxshard._native mirrors
a C struct of the installed headers, field by field.  The test writes a C
program from the ctypes declarations (sizeof of each struct, offsetof of
each field Python names), compiles it against lib/include and format/, and
compares what C says with what ctypes computed: a field added, removed,
reordered or retyped on one side only fails here, not as a corrupted
option at run time.

usage: layout_test.py BUILD SRC"""
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD, SRC = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(SRC, "python"))

from ctxshard import _native as n  # noqa: E402

# Python structure -> C type.  Every Structure subclass in _native must be
# here (test_every_structure_listed).
C_TYPES = {
    "Diag": "cxs_diag", "Info": "cxs_info", "OpenOpts": "cxs_open_opts",
    "HugepageInfo": "cxs_hugepage_info",
    "Stats": "cxs_stats", "Utterance": "cxs_utterance", "SamplerOpts": "cxs_sampler_opts",
    "Norm": "cxs_norm", "LoaderOpts": "cxs_loader_opts", "Memory": "cxs_memory",
    "WarmResult": "cxs_warm_result", "Batch": "cxs_batch", "Position": "cxs_position",
    "FetchInfo": "cxs_fetch_info", "CacheEntry": "cxs_cache_entry",
    "GpuProbeInfo": "cxs_gpu_probe_info", "GpuOpts": "cxs_gpu_opts",
    "GpuBatch": "cxs_gpu_batch", "GpuLoaderInfo": "cxs_gpu_loader_info",
    "GpuUttOpts": "cxs_gpu_utt_opts", "GpuUttBatch": "cxs_gpu_utt_batch",
    "WriterOpts": "cxs_writer_opts", "WriterUtt": "cxs_writer_utt",
    "WriterInfo": "cxs_writer_info",
    "KaldiOpts": "cxs_kaldi_opts", "ImportInfo": "cxs_import_info", "NpyOpts": "cxs_npy_opts",
    "UttSamplerOpts": "cxs_utt_sampler_opts", "UttLoaderOpts": "cxs_utt_loader_opts",
    "UttBatch": "cxs_utt_batch",
    "MixOpts": "cxs_mix_opts", "MixFrames": "cxs_mix_frames",
    "MixUttOpts": "cxs_mix_utt_opts", "MixUtts": "cxs_mix_utts",
}


def structures():
    return {name: obj for name, obj in vars(n).items()
            if isinstance(obj, type) and issubclass(obj, ctypes.Structure)
            and obj is not ctypes.Structure}


class Layout(unittest.TestCase):
    def test_every_structure_listed(self):
        self.assertEqual(sorted(structures()), sorted(C_TYPES))

    def test_sizes_and_offsets_match_c(self):
        cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if not cc:
            self.skipTest("no C compiler")
        lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "ctxshard.h"',
                 '#include "ctxshard_gpu.h"', '#include "ctxshard_writer.h"',
                 '#include "ctxshard_import.h"',
                 "int main(void) {"]
        want = []
        for py, c in sorted(C_TYPES.items()):
            st = structures()[py]
            lines.append(f'    printf("{py} %zu\\n", sizeof({c}));')
            want.append(f"{py} {ctypes.sizeof(st)}")
            for f in st._fields_:
                lines.append(f'    printf("{py}.{f[0]} %zu %zu\\n", offsetof({c}, {f[0]}), '
                             f'sizeof((({c} *)0)->{f[0]}));')
                want.append(f"{py}.{f[0]} {getattr(st, f[0]).offset} {ctypes.sizeof(f[1])}")
        lines += ["    return 0;", "}"]
        with tempfile.TemporaryDirectory() as tmp:
            src, exe = os.path.join(tmp, "layout.c"), os.path.join(tmp, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines) + "\n")
            r = subprocess.run([cc, "-std=c11", "-I", os.path.join(SRC, "lib", "include"),
                                "-I", os.path.join(SRC, "format"), src, "-o", exe],
                               capture_output=True, text=True)
            # a field Python names that C lacks fails to compile: say which
            self.assertEqual(r.returncode, 0, r.stderr)
            got = subprocess.run([exe], check=True, capture_output=True,
                                 text=True).stdout.split("\n")[:-1]
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            self.assertEqual(g, w, "C (left) and ctypes (right) disagree")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[3:], verbosity=1)
