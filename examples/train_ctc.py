"""Train a small sequence model with CTC on whole utterances from a packed
ctxshard dataset of label sequences (HW3P2-style transcripts), the way a
course student would, minus the data-loading code: padded batches of
whole utterances under a frame budget, bucketed by length.

    /usr/bin/python3 examples/train_ctc.py --synth          # make a small dataset first
    /usr/bin/python3 examples/train_ctc.py --train TRAIN --dev DEV [--epochs 8]

TRAIN and DEV are datasets packed with `ctxshard pack RAW OUT --transcripts
sequence` (or `both`).  --synth writes synthetic utterances whose phoneme
sequences are the runs of their frames (`ctxshard synth --transcripts
sequence`) and packs them with per-utterance normalisation.  After every
epoch it prints the training loss and the dev phoneme error rate (PER:
edit distance of the greedy decoding to the reference sequence, over the
reference length).

Run from the checkout after the README's first command (PYTHONPATH=python is
set by the script itself when ctxshard is not installed)."""
import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
try:
    import ctxshard  # noqa: F401  (installed: pip install .)
except ImportError:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import ctxshard  # noqa: E402
import ctxshard.torch as cxt  # noqa: E402


def synthesise(work, train_utts, dev_utts):
    exe = [sys.executable, "-m", "ctxshard"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(ctxshard.__file__)))
    paths = []
    for split, n, offset in (("train", train_utts, 0), ("dev", dev_utts, train_utts)):
        raw, out = os.path.join(work, split + "-raw"), os.path.join(work, split)
        subprocess.run([*exe, "synth", raw, "--utts", str(n), "--offset", str(offset),
                        "--seed", "1", "--transcripts", "sequence", "--quiet"],
                       check=True, env=env)
        subprocess.run([*exe, "pack", raw, out, "--transcripts", "sequence",
                        "--normalize", "utterance", "--quiet"], check=True, env=env)
        paths.append(out)
    return paths


def reverse_padded(x, lengths):
    """Each sequence of x [B, T, H] reversed within its own length (the
    padding stays at the end)."""
    T = x.shape[1]
    t = torch.arange(T, device=x.device).unsqueeze(0)
    n = lengths.to(x.device).unsqueeze(1)
    idx = torch.where(t < n, n - 1 - t, t)
    return x.gather(1, idx.unsqueeze(2).expand_as(x))


class ConvCTC(nn.Module):
    """Four 1-D convolutions over 5 frames each (a receptive field of 17
    frames), a linear layer to the vocabulary plus the CTC blank (the
    last class).  Fast on a CPU."""

    def __init__(self, dim, classes, hidden):
        super().__init__()
        layers, width = [], dim
        for _ in range(4):
            layers += [nn.Conv1d(width, hidden, 5, padding=2), nn.BatchNorm1d(hidden), nn.GELU()]
            width = hidden
        self.conv = nn.Sequential(*layers)
        self.out = nn.Linear(hidden, classes + 1)

    def forward(self, x, lengths):
        h = self.conv(x.transpose(1, 2).contiguous()).transpose(1, 2)
        return self.out(h).log_softmax(-1)  # [B, T, classes + 1]


class LstmCTC(nn.Module):
    """A convolution over 5 frames, a bidirectional LSTM, a linear layer to
    the vocabulary plus the blank.  The backward direction runs on each
    utterance reversed within its length, so that padding never enters it
    (what a packed sequence does; torch's CPU backward through packed
    sequences is many times slower).  Better with a GPU (--device cuda)."""

    def __init__(self, dim, classes, hidden):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(dim, hidden, 5, padding=2), nn.BatchNorm1d(hidden),
                                  nn.GELU())
        self.fwd = nn.LSTM(hidden, hidden, batch_first=True)
        self.bwd = nn.LSTM(hidden, hidden, batch_first=True)
        self.out = nn.Linear(2 * hidden, classes + 1)

    def forward(self, x, lengths):
        h = self.conv(x.transpose(1, 2).contiguous()).transpose(1, 2)
        f, _ = self.fwd(h)
        b, _ = self.bwd(reverse_padded(h, lengths))
        h = torch.cat([f, reverse_padded(b, lengths)], 2)
        return self.out(h).log_softmax(-1)


def edit_distance(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def greedy(logp, lengths, blank):
    """Best path: the most likely class per frame, repeats merged, blanks
    dropped."""
    best = logp.argmax(-1)
    out = []
    for b in range(len(lengths)):
        seq, last = [], blank
        for c in best[b, :lengths[b]].tolist():
            if c != last and c != blank:
                seq.append(c)
            last = c
        out.append(seq)
    return out


def evaluate(model, path, budget, blank, device):
    errors = total = 0
    model.eval()
    with torch.no_grad():
        # labels=False: a dataset packed with --transcripts both has frame labels too
        for x, lengths, targets, tlens in cxt.UtteranceLoader(path, budget, shuffle=False,
                                                              labels=False):
            logp = model(x.to(device), lengths)
            for hyp, ref, n in zip(greedy(logp, lengths, blank), targets, tlens):
                ref = ref[:n].tolist()
                errors += edit_distance(hyp, ref)
                total += len(ref)
    model.train()
    return errors / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\nRun from")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="the packed training split (with label sequences)")
    ap.add_argument("--dev", help="the packed dev split (PER after every epoch)")
    ap.add_argument("--synth", action="store_true", help="synthesise a small train/dev set first")
    ap.add_argument("--train-utts", type=int, default=240, help="--synth: training utterances")
    ap.add_argument("--dev-utts", type=int, default=40, help="--synth: dev utterances")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--frame-budget", type=int, default=8000, help="padded frames per batch")
    ap.add_argument("--lr", type=float, default=3e-3, help="AdamW learning rate")
    ap.add_argument("--model", choices=("conv", "lstm"), default="conv",
                    help="conv: four convolutions (fast on a CPU); lstm: a bidirectional LSTM "
                    "(slow on a CPU)")
    ap.add_argument("--hidden", type=int, default=128, help="channels (conv) or LSTM width "
                    "(each direction)")
    ap.add_argument("--threads", type=int, default=1, help="loader threads (default 1)")
    ap.add_argument("--device", default="cpu", help="where the model runs: cpu (default) or "
                    "cuda")
    ap.add_argument("--seed", type=int, default=0, help="order and initialisation seed")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    # PyTorch 1.13's oneDNN backward of Conv1d has been seen to return NaN
    # gradients for the first layer on AVX-512 CPUs (finite loss, finite
    # output gradient); its plain CPU convolution is exact and fast enough.
    torch.backends.mkldnn.enabled = False
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - a.threads))
    tmp = None
    if a.synth:
        tmp = tempfile.TemporaryDirectory()
        a.train, a.dev = synthesise(tmp.name, a.train_utts, a.dev_utts)
    if not a.train:
        ap.error("give --train (and --dev), or --synth")
    train = ctxshard.open(a.train)
    if not train.has_label_seqs:
        sys.exit(f"{a.train}: no label sequences: pack it with --transcripts sequence")
    classes = train.num_classes
    blank = classes
    print(f"train: {train.num_utterances} utterances, {len(train)} frames, dim {train.dim}, "
          f"{classes} symbols + blank; frame budget {a.frame_budget}")
    device = torch.device(a.device)
    model = (ConvCTC if a.model == "conv" else LstmCTC)(train.dim, classes, a.hidden).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    ctc = nn.CTCLoss(blank=blank, zero_infinity=True)
    # labels=False: a dataset packed with --transcripts both has frame labels too
    loader = cxt.UtteranceLoader(train, a.frame_budget, shuffle=True, seed=a.seed,
                                 threads=a.threads, labels=False)
    for epoch in range(a.epochs):
        loader.set_epoch(epoch)
        t0, utts, frames, total = time.perf_counter(), 0, 0, 0.0
        for x, lengths, targets, tlens in loader:
            logp = model(x.to(device), lengths)
            # the -100 past each target length is never read: the targets go as they are
            loss = ctc(logp.transpose(0, 1), targets.to(device), lengths, tlens)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            utts += len(lengths)
            frames += int(lengths.sum())
            total += loss.item() * len(lengths)
        dt = time.perf_counter() - t0
        line = (f"epoch {epoch + 1}: CTC loss {total / utts:.3f}, {utts / dt:.1f} utterances/s "
                f"({frames / dt:.0f} frames/s)")
        if a.dev:
            line += f", dev PER {evaluate(model, a.dev, a.frame_budget, blank, device):.1%}"
        print(line, flush=True)
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
