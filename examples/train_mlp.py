"""Train a frame-level phoneme classifier (an MLP over context windows) on a
packed ctxshard dataset, the way a course student would, minus the
data-loading code.

    /usr/bin/python3 examples/train_mlp.py --train TRAIN --dev DEV [--context 10]
    /usr/bin/python3 examples/train_mlp.py --synth        # make a small dataset first
    /usr/bin/python3 examples/train_mlp.py --synth --shuffle block   # the order for data
                                                                     # larger than memory
    /usr/bin/python3 examples/train_mlp.py --train TRAIN --dev DEV --test TEST \\
        --normalize --weighted --predictions submission.csv

--synth packs its splits with per-utterance normalisation (--synth-raw:
without).  --normalize normalises every split (train, dev, test) with the
training split's statistics.  --predictions writes the test split's predictions as
the course's submission file: a header `id,label`, then one row per test
frame in dataset order, id the frame's number and label its phoneme symbol.

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


def synthesise(work, train_utts, dev_utts, per_utterance):
    # the installed command, or the checkout's build: whichever ctxshard this imported
    exe = [sys.executable, "-m", "ctxshard"]
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(ctxshard.__file__)))
    paths = {}
    for split, n, offset in (("train", train_utts, 0), ("dev", dev_utts, train_utts),
                             ("test", dev_utts, train_utts + dev_utts)):
        raw, out = os.path.join(work, split + "-raw"), os.path.join(work, split)
        subprocess.run([*exe, "synth", raw, "--utts", str(n), "--offset", str(offset),
                        "--seed", "1", "--quiet"] + (["--no-transcripts"] if split == "test"
                                                     else []), check=True, env=env)
        # per-utterance mean and variance normalisation (the usual speech
        # front end): removes each synthetic speaker's offset
        norm = ["--normalize", "utterance"] if per_utterance else []
        subprocess.run([*exe, "pack", raw, out, "--quiet", *norm], check=True, env=env)
        paths[split] = out
    return paths["train"], paths["dev"], paths["test"]


def write_predictions(model, path, context, batch_size, normalize, vocab, csv):
    """One row per test frame, in dataset order: id (the frame's number),
    label (the predicted phoneme symbol)."""
    loader = cxt.Loader(path, context, batch_size, shuffle=False, normalize=normalize,
                        labels=False)
    model.eval()
    n = 0
    with torch.no_grad(), open(csv, "w") as f:
        f.write("id,label\n")
        for x in loader:  # labels=False (a test split has none): x alone
            for p in model(x).argmax(1).tolist():
                f.write(f"{n},{vocab[p]}\n")
                n += 1
    model.train()
    return n


def evaluate(model, path, context, batch_size, normalize):
    loader = cxt.Loader(path, context, batch_size, shuffle=False, normalize=normalize)
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train()
    return correct / total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\nRun from")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", help="the packed training split")
    ap.add_argument("--dev", help="the packed dev split (accuracy after every epoch)")
    ap.add_argument("--test", help="the packed test split (features only), for --predictions")
    ap.add_argument("--synth", action="store_true", help="synthesise a small train/dev/test "
                    "set first")
    ap.add_argument("--normalize", action="store_true", help="normalise every split with the "
                    "training split's mean and variance")
    ap.add_argument("--weighted", action="store_true", help="class-balanced sampling (draws "
                    "with replacement, inverse class frequency) instead of a shuffle")
    ap.add_argument("--predictions", metavar="CSV", help="write the test split's predicted "
                    "phonemes as a submission CSV (id,label; one row per test frame)")
    ap.add_argument("--synth-raw", action="store_true", help="--synth: store the features as "
                    "synthesised, each utterance shifted by its speaker's offset (by default "
                    "they are normalised per utterance at pack time)")
    ap.add_argument("--train-utts", type=int, default=200, help="--synth: training utterances")
    ap.add_argument("--dev-utts", type=int, default=40, help="--synth: dev (and test) "
                    "utterances")
    ap.add_argument("--context", type=int, default=10, help="k: windows of 2k+1 frames")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3, help="AdamW learning rate")
    ap.add_argument("--threads", type=int, default=1, help="loader threads (default 1)")
    ap.add_argument("--hidden", type=int, default=512, help="first hidden layer width")
    ap.add_argument("--shuffle", choices=("full", "block", "none"), default="full",
                    help="training order: full shuffle (default), block (blocks of whole "
                    "utterances within --memory, for data larger than memory) or none")
    ap.add_argument("--memory", help="block order: the page cache it may use, e.g. 512M "
                    "(default: a quarter of the training data, so that it is read in blocks)")
    ap.add_argument("--seed", type=int, default=0, help="order and initialisation seed")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    # Cores for the model, not for idle spinning: the loader's threads plus
    # torch's must not exceed the machine (the classic oversubscription).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - a.threads))
    tmp = None
    if a.synth:
        tmp = tempfile.TemporaryDirectory()
        a.train, a.dev, synth_test = synthesise(tmp.name, a.train_utts, a.dev_utts,
                                                not a.synth_raw)
        a.test = a.test or synth_test
    if not a.train:
        ap.error("give --train (and --dev), or --synth")
    if a.predictions and not a.test:
        ap.error("--predictions needs --test (the test split to predict)")
    if a.weighted and a.shuffle != "full":
        ap.error("--weighted replaces the shuffle: leave --shuffle at full")

    train = ctxshard.open(a.train)
    if a.dev:
        # a label is an index into its split's vocabulary: dev numbered
        # otherwise would be scored against other phonemes
        with ctxshard.open(a.dev) as dev:
            if dev.vocab != train.vocab:
                ap.error(f"{a.dev}: its vocabulary is not {a.train}'s ({len(dev.vocab)} symbols, "
                         f"{len(train.vocab)} in train): pack or import it again with "
                         f"--vocab FILE, the file `ctxshard vocab {a.train}` prints")
    # every split normalised with train's statistics (normalize=train for
    # the training split itself says so explicitly)
    norm = train if a.normalize else False
    stats = train.stats
    majority = stats.label_counts.max() / stats.count
    print(f"train: {len(train)} frames, {train.num_utterances} utterances, dim {train.dim}; "
          f"context {a.context} -> input size {train.input_size(a.context)}; "
          f"majority class {majority:.1%}")
    model = nn.Sequential(
        nn.Linear(train.input_size(a.context), a.hidden), nn.BatchNorm1d(a.hidden), nn.ReLU(),
        nn.Linear(a.hidden, a.hidden // 2), nn.BatchNorm1d(a.hidden // 2), nn.ReLU(),
        nn.Linear(a.hidden // 2, train.num_classes))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()
    order = {"full": True, "block": "block", "none": False}[a.shuffle]
    extra = {}
    if a.shuffle == "block":
        i = train.info
        row = train.dim * (4 if train.dtype == "float32" else 2)
        least = 9 * (i["max_length"] + train.guard) * row  # 8 blocks + 1 read ahead
        extra["memory"] = a.memory or max(train.nbytes // 4, least)
    elif a.memory:
        ap.error("--memory applies to --shuffle block")
    if a.weighted:
        extra["weighted"] = True
        order = True
    loader = cxt.Loader(train, a.context, a.batch_size, shuffle=order, seed=a.seed,
                        threads=a.threads, normalize=norm, **extra)
    if a.shuffle == "block":
        s = loader.sampler
        print(f"block order: memory {s.memory} bytes, {s.num_blocks(0)} blocks of "
              f"{s.block_bytes} bytes, {s.blocks} drawn from at once")
    for epoch in range(a.epochs):
        loader.set_epoch(epoch)
        t0, seen, total_loss, correct = time.perf_counter(), 0, 0.0, 0
        for x, y in loader:
            out = model(x)
            loss = loss_fn(out, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(y)
            total_loss += loss.item() * len(y)
            correct += (out.argmax(1) == y).sum().item()
        dt = time.perf_counter() - t0
        line = (f"epoch {epoch + 1}: loss {total_loss / seen:.3f}, train accuracy "
                f"{correct / seen:.1%}, {seen / dt:.0f} samples/s")
        if a.dev:
            line += (f", dev accuracy "
                     f"{evaluate(model, a.dev, a.context, a.batch_size, norm):.1%}")
        print(line, flush=True)
    if a.predictions:
        n = write_predictions(model, a.test, a.context, a.batch_size, norm, train.vocab,
                              a.predictions)
        print(f"wrote {a.predictions}: {n} predictions (id,label)")
    if tmp:
        tmp.cleanup()


if __name__ == "__main__":
    main()
