"""From audio to shards, with no .npy files in between: 28-dim MFCC of every
wav file in a directory, computed with torchaudio (Kaldi-compatible: 25 ms
windows every 10 ms), written through ctxshard.Writer, then served by the
Loader.

    /usr/bin/python3 examples/from_audio.py WAVDIR OUT [--align FILE] [--dtype float16]
    /usr/bin/python3 examples/from_audio.py --demo WAVDIR OUT   # make a few wav files first

Utterance ids are the wav files' names without .wav.  Without --align the
dataset holds features only (a test split).  --align FILE gives per-frame
phoneme labels, one utterance a line, Kaldi's `ali-to-phones --per-frame`
text form:

    ID SYMBOL SYMBOL ...        (one symbol per 10 ms frame)

over HW1P2's phoneme set (ctxshard.PHONEMES).  An utterance whose alignment
does not match its frames is left out and listed in the dataset (`ctxshard
info OUT`), not silently trimmed.  Needs Debian's python3-torchaudio."""
import argparse
import math
import os
import sys
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import ctxshard  # noqa: F401  (installed: pip install .)
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.torch as cxt  # noqa: E402

RATE = 16000
SHIFT = RATE // 100   # 10 ms
WINDOW = RATE // 40   # 25 ms


def mfcc(path):
    """[T, 28] float32 MFCC of one wav file (mono; the first channel)."""
    wav, rate = torchaudio.load(path)
    feats = torchaudio.compliance.kaldi.mfcc(wav[:1], sample_frequency=rate, num_ceps=28,
                                             num_mel_bins=40, dither=0.0)
    return feats.numpy()


def read_alignment(path):
    align = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) < 2:
                sys.exit(f"{path}: line {n}: expected ID SYMBOL SYMBOL ...")
            align[parts[0]] = parts[1:]
    return align


def demo(wavdir, align_path, n=6, seed=0):
    """n short wav files of tones and noise, and a per-frame alignment."""
    rng = np.random.default_rng(seed)
    os.makedirs(wavdir, exist_ok=True)
    phones = [p for p in ctxshard.PHONEMES if not p.startswith("[S") and p != "[EOS]"]
    with open(align_path, "w", encoding="utf-8") as al:
        for u in range(n):
            seconds = rng.uniform(0.5, 2.0)
            samples = int(seconds * RATE)
            t = np.arange(samples) / RATE
            f0 = rng.uniform(100, 300)
            x = 0.3 * np.sin(2 * math.pi * f0 * t) + 0.05 * rng.standard_normal(samples)
            pcm = (np.clip(x, -1, 1) * 32767).astype("<i2")
            name = f"demo-{u:03d}"
            with wave.open(os.path.join(wavdir, name + ".wav"), "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(RATE)
                w.writeframes(pcm.tobytes())
            frames = 1 + (samples - WINDOW) // SHIFT  # Kaldi's snip_edges framing
            labels = rng.choice(phones, size=frames)
            al.write(name + " " + " ".join(labels) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wavdir")
    ap.add_argument("out")
    ap.add_argument("--align", help="per-frame phoneme alignment (ID SYMBOL ...)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    ap.add_argument("--context", type=int, default=10)
    ap.add_argument("--demo", action="store_true",
                    help="first write a few wav files into WAVDIR and their alignment")
    a = ap.parse_args()
    if a.demo:
        a.align = a.align or os.path.join(a.wavdir, "align.txt")
        demo(a.wavdir, a.align)
    names = sorted((f[:-4] for f in os.listdir(a.wavdir) if f.endswith(".wav")),
                   key=lambda s: s.encode())  # the writer takes ids in byte order
    if not names:
        sys.exit(f"{a.wavdir}: no .wav files")
    align = read_alignment(a.align) if a.align else None
    vocab = "phonemes" if align is not None else None
    with ctxshard.Writer(a.out, dtype=a.dtype, vocab=vocab, on_error="skip") as w:
        for name in names:
            x = mfcc(os.path.join(a.wavdir, name + ".wav"))
            if align is not None and name not in align:
                w.skip(name, "no alignment")
                continue
            labels = align[name] if align is not None else None
            if not w.add(name, x, labels=labels):
                print(f"{name}: left out (see `ctxshard info {a.out}`)", file=sys.stderr)
        info = w.info
    print(f"wrote {info['num_utterances']} utterances, {info['num_frames']} frames x "
          f"{info['dim']} to {a.out} ({info['num_skipped']} left out)")

    # Served: batches of context windows, as a training loop takes them.
    loader = cxt.Loader(a.out, context=a.context, batch_size=256, labels=align is not None,
                        prefetch=False)
    batches = frames = 0
    for batch in loader:
        x = batch[0] if align is not None else batch  # (x, y), or x alone
        assert x.shape[1] == (2 * a.context + 1) * info["dim"] and torch.isfinite(x).all()
        batches += 1
        frames += x.shape[0]
    print(f"served {frames} frames in {batches} batches of context {a.context}")


if __name__ == "__main__":
    main()
