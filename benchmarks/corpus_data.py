"""Small, deterministic, offline data for the real-script corpus (benchmarks/bench_corpus.py).

Nothing here downloads anything: MNIST is written as raw idx files where torchvision's ``MNIST``
looks for them (``ROOT/MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte``; with the files
present its ``_check_exists`` is true and ``download=True`` does nothing), and the language
model's corpus is a small generated text in the layout of wikitext-2 (``train.txt``,
``valid.txt``, ``test.txt``).
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

MNIST_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def idx_images(images: list[bytes], rows: int, cols: int) -> bytes:
    """An idx3-ubyte file: magic 0x00000803 (unsigned bytes, 3 dimensions), big-endian sizes."""
    return struct.pack(">IIII", 0x803, len(images), rows, cols) + b"".join(images)


def idx_labels(labels: list[int]) -> bytes:
    """An idx1-ubyte file: magic 0x00000801, the count, one byte per label."""
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def digit_image(label: int, rng: random.Random, side: int = 28) -> bytes:
    """A 28x28 image a classifier can learn: a bright bar whose row depends on the label, noise."""
    row0 = 2 + 2 * label
    pixels = bytearray(rng.randrange(0, 64) for _ in range(side * side))
    for r in range(row0, row0 + 3):
        for c in range(4, side - 4):
            pixels[r * side + c] = 200 + rng.randrange(0, 56)
    return bytes(pixels)


def write_mnist(root: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    """Write ``n_train``/``n_test`` labelled images under ``root/MNIST/raw``; returns it."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for prefix, count in (("train", n_train), ("t10k", n_test)):
        labels = [rng.randrange(10) for _ in range(count)]
        images = [digit_image(label, rng) for label in labels]
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(idx_images(images, 28, 28))
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(idx_labels(labels))
    return raw


def sentence(rng: random.Random, vocabulary: list[str]) -> str:
    words = [vocabulary[min(int(rng.expovariate(0.02)), len(vocabulary) - 1)] for _ in range(12)]
    return " ".join(words) + " ."


def write_wikitext(folder: Path, train_lines: int, eval_lines: int, seed: int = 0) -> Path:
    """A wikitext-2-shaped corpus: ``train.txt``, ``valid.txt``, ``test.txt`` of generated
    sentences over a 400-word vocabulary (Zipf-like frequencies), 14 tokens a line with
    the ``<eos>`` the tokenizer adds."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(400)]
    for name, lines in (("train", train_lines), ("valid", eval_lines), ("test", eval_lines)):
        text = "\n".join(sentence(rng, vocabulary) for _ in range(lines)) + "\n"
        (folder / f"{name}.txt").write_text(text, encoding="utf8")
    return folder


SPEAKERS = ("FIRST CITIZEN", "MENENIUS", "CORIOLANUS", "VOLUMNIA", "BRUTUS", "SICINIUS")
PLAY_WORDS = (
    "the and to of my you that in is not with be your his this it for me have he what but "
    "thou thy shall will so him are good lord our now let come do no we sir all more than "
    "love king make well then know here there would they o hath say speak her most such"
).split()


def play_text(chars: int, seed: int = 0) -> str:
    """A tiny-shakespeare-shaped text of about ``chars`` characters: speakers' names in
    capitals, a colon, a few lines of words, blank lines between speeches."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < chars:
        lines = [rng.choice(SPEAKERS).title() + ":"]
        for _ in range(rng.randint(1, 4)):
            words = [rng.choice(PLAY_WORDS) for _ in range(rng.randint(4, 10))]
            line = " ".join(words)
            lines.append(line[0].upper() + line[1:] + rng.choice(",.;?!"))
        speech = "\n".join(lines) + "\n\n"
        out.append(speech)
        size += len(speech)
    return "".join(out)


def write_shakespeare_char(folder: Path, prepare: Path, python: str, chars: int = 200_000) -> Path:
    """nanoGPT's ``data/shakespeare_char``: ``input.txt`` made here (``play_text``), then the
    vendored ``prepare.py`` run on it in ``folder`` (it writes ``train.bin``, ``val.bin`` and
    ``meta.pkl`` next to itself). ``prepare.py`` imports ``requests`` to download the text when
    ``input.txt`` is missing; it is present, so an empty stand-in module is given instead."""
    import shutil
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "input.txt").write_text(play_text(chars), encoding="utf-8")
    shutil.copyfile(prepare, folder / "prepare.py")
    run = (
        "import sys, types, runpy; sys.modules['requests'] = types.ModuleType('requests'); "
        "runpy.run_path('prepare.py', run_name='__main__')"
    )
    subprocess.run([python, "-c", run], cwd=folder, check=True, capture_output=True)
    return folder


CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer")
CIFAR10_CLASSES += ("dog", "frog", "horse", "ship", "truck")


def cifar_image(label: int, rng: random.Random) -> bytes:
    """A 3x32x32 image (CIFAR's layout: the red plane, green, blue) a classifier can learn: the
    label's colour in a square whose place depends on the label, noise elsewhere."""
    pixels = bytearray(rng.randrange(0, 64) for _ in range(3 * 32 * 32))
    top, left = 4 + 2 * (label % 5), 4 + 8 * (label // 5)
    for ch in range(3):
        level = 80 + 60 * ((label + ch) % 3)
        for r in range(top, top + 8):
            for c in range(left, left + 8):
                pixels[ch * 1024 + r * 32 + c] = level + rng.randrange(0, 30)
    return bytes(pixels)


def write_cifar10(root: Path, n_train: int, n_test: int, seed: int = 0) -> Path:
    """CIFAR-10's python version (``root/cifar-10-batches-py``: five training batches, a test
    batch, ``batches.meta``), pickled as the real files are, ``n_train`` images split across the
    five batches. torchvision checks the real files' MD5 sums: the corpus's shim lets it take
    these (``CORPUS_CIFAR10_AS_IS``)."""
    import pickle

    import numpy as np

    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_batch = n_train // len(CIFAR10_TRAIN_BATCHES)
    for name, count in [(b, per_batch) for b in CIFAR10_TRAIN_BATCHES] + [("test_batch", n_test)]:
        labels = [rng.randrange(10) for _ in range(count)]
        data = np.frombuffer(b"".join(cifar_image(y, rng) for y in labels), dtype=np.uint8)
        batch = {"batch_label": name, "labels": labels, "data": data.reshape(count, 3072)}
        (folder / name).write_bytes(pickle.dumps(batch))
    meta = {"label_names": list(CIFAR10_CLASSES), "num_cases_per_batch": per_batch}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))
    return folder
