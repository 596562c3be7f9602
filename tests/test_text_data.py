"""Tests of training/data/text.py: Mikolov-format corpora, vocabularies and BPTT batches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from training.data.text import (
    EOS,
    UNK,
    CorpusFileError,
    CorpusNotFoundError,
    Split,
    bptt_batches,
    bptt_layout,
    load_corpus,
)
from zoo.char_lm import END, PAD, START


def write_corpus(directory: Path, train: str, valid: str, test: str, prefix: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for split, text in (("train", train), ("valid", valid), ("test", test)):
        (directory / f"{prefix}{split}.txt").write_text(text, encoding="utf-8")
    return directory


@pytest.fixture
def corpus(tmp_path):
    # PTB's look: a leading space, <unk> in the text; 'zebra' and 'q' only outside training.
    return load_corpus(write_corpus(
        tmp_path / "tiny", " the cat sat\n the <unk> ran home\n",
        " the zebra sat\n", " cat ran q\n", prefix="ptb."))


def decode(corpus, row: np.ndarray) -> str:
    """The word spelled by one row of character ids (START ... END, PAD)."""
    assert row[0] == START
    end = int(np.flatnonzero(row == END)[0])
    assert (row[end + 1:] == PAD).all()
    return "".join(corpus.chars[i] for i in row[1:end])


def test_word_vocabulary_is_the_training_split_in_kims_order(corpus):
    assert corpus.words == (UNK, "the", "cat", "sat", EOS, "ran", "home")
    assert corpus.name == "tiny"


def test_eos_after_every_line_and_unknown_words_map_to_unk(corpus):
    w = {word: i for i, word in enumerate(corpus.words)}
    assert corpus.train.words.tolist() == [w[x] for x in
                                           "the cat sat <eos> the <unk> ran home <eos>".split()]
    # 'zebra' and 'q' never occur in training: the id of <unk>, as the text's own <unk>.
    assert corpus.valid.words.tolist() == [w["the"], w[UNK], w["sat"], w[EOS]]
    assert corpus.test.words.tolist() == [w["cat"], w["ran"], w[UNK], w[EOS]]
    assert corpus.word_id("zebra") == corpus.word_id(UNK) == 0
    for split in (corpus.train, corpus.valid, corpus.test):
        assert split.words.dtype == np.int32 and split.chars.dtype == np.int32


def test_character_vocabulary_and_spellings(corpus):
    # PAD, START, END, then the sorted characters of all three splits, '+' and '|' included.
    letters = sorted(set("thecatsatranhomezebraq"))
    assert corpus.chars == (" ", "{", "}", *sorted(["+", "|", *letters]))
    assert (PAD, START, END) == (0, 1, 2)
    assert corpus.max_word_length == len("zebra") + 2
    spelled = [decode(corpus, row) for row in corpus.train.chars]
    assert spelled == "the cat sat + the | ran home +".split()
    # An unknown word keeps its own spelling (the character CNN sees it); its word id is <unk>.
    assert [decode(corpus, row) for row in corpus.valid.chars] == ["the", "zebra", "sat", "+"]
    ids = {c: i for i, c in enumerate(corpus.chars)}
    np.testing.assert_array_equal(
        corpus.spell("cat"), [START, ids["c"], ids["a"], ids["t"], END, PAD, PAD])
    np.testing.assert_array_equal(corpus.spell(EOS), [START, ids["+"], END, PAD, PAD, PAD, PAD])
    np.testing.assert_array_equal(corpus.spell(UNK), [START, ids["|"], END, PAD, PAD, PAD, PAD])
    np.testing.assert_array_equal(corpus.test.chars[2], corpus.spell("q"))
    assert corpus.split("valid") is corpus.valid
    with pytest.raises(ValueError, match="Unknown split"):
        corpus.split("dev")


def test_reserved_braces_are_removed_and_plain_names_are_read(tmp_path):
    corpus = load_corpus(write_corpus(tmp_path, "a {b}\n{\n", "a\n", "b\n"), name="braces")
    assert corpus.name == "braces"
    # '{' and '}' spell START and END (Kim removes them from the text); the line of '{' alone
    # is an empty line, which still ends in <eos>.
    assert corpus.words == (UNK, "a", "b", EOS)
    assert corpus.train.words.tolist() == [1, 2, 3, 3]
    assert corpus.chars == (" ", "{", "}", "+", "a", "b", "|")


def test_a_limit_pads_the_spellings_and_a_longer_word_is_one_clear_line(tmp_path):
    directory = write_corpus(tmp_path, "a bb\n", "a\nccc dddddd\n", "a\n")
    assert load_corpus(directory, max_word_length=12).train.chars.shape == (3, 12)
    with pytest.raises(CorpusFileError) as info:
        load_corpus(directory, max_word_length=7)
    message = str(info.value)
    assert "\n" not in message
    assert f"{directory / 'valid.txt'}, line 2" in message and "'dddddd'" in message
    assert "max_word_length 7" in message and "raise max_word_length to 8" in message


def reconstruct(split: Split, batch_size: int, steps: int):
    """The BPTT batches built slowly, straight from the definition, batch by batch."""
    n = len(split.words)
    n_batches = (n - 1) // (batch_size * steps)
    row_length = n_batches * steps
    inputs, targets = [], []
    for k in range(n_batches):
        for i in range(batch_size):
            start = i * row_length + k * steps
            inputs.append([split.chars[start + t] for t in range(steps)])
            targets.append([split.words[start + t + 1] for t in range(steps)])
    return np.array(inputs), np.array(targets)


@pytest.mark.parametrize("batch_size,steps", [(3, 4), (2, 5), (1, 7), (4, 1)])
def test_bptt_batches_are_contiguous_per_row(tmp_path, batch_size, steps):
    # Every word distinct and in order, one line: word id = 1 + stream position (<unk> is 0).
    text = " ".join(f"w{i}" for i in range(100)) + "\n"
    corpus = load_corpus(write_corpus(tmp_path, text, "w1\n", "w2\n"))
    split = corpus.train  # 101 tokens with the final <eos>
    inputs, targets = bptt_batches(split, batch_size, steps)
    expected_inputs, expected_targets = reconstruct(split, batch_size, steps)
    np.testing.assert_array_equal(inputs, expected_inputs)
    np.testing.assert_array_equal(targets, expected_targets)
    n_batches, dropped = bptt_layout(len(split), batch_size, steps)
    assert inputs.shape == (n_batches * batch_size, steps, corpus.max_word_length)
    assert targets.shape == (n_batches * batch_size, steps)
    assert n_batches * batch_size * steps + 1 + dropped == len(split)
    position = np.vectorize(lambda row: int(decode(corpus, row)[1:]), signature="(w)->()")(inputs)
    # Targets are the inputs shifted by one token.
    np.testing.assert_array_equal(targets - 1, position + 1)
    # Row i of batch k continues row i of batch k-1 (a stateful LSTM's layout).
    for k in range(1, n_batches):
        previous = position[(k - 1) * batch_size:k * batch_size, -1]
        np.testing.assert_array_equal(position[k * batch_size:(k + 1) * batch_size, 0],
                                      previous + 1)
    # Rows of one batch are contiguous segments, one after the other.
    first = position[:batch_size, 0]
    np.testing.assert_array_equal(np.diff(first), n_batches * steps)


def test_bptt_layout_and_a_split_too_short_for_one_batch(tmp_path):
    assert bptt_layout(73760, 20, 35) == (105, 73760 - 105 * 700 - 1)
    assert bptt_layout(701, 20, 35) == (1, 0)
    assert bptt_layout(700, 20, 35) == (0, 700)
    corpus = load_corpus(write_corpus(tmp_path, "a b c\n", "a\n", "b\n"))
    with pytest.raises(CorpusFileError, match=r"4 tokens is too short .* 2 rows x 2 steps \(5 "):
        bptt_batches(corpus.train, 2, 2)


def one_line_error(directory, error, *patterns):
    with pytest.raises(error) as info:
        load_corpus(directory)
    message = str(info.value)
    assert "\n" not in message, message
    for pattern in patterns:
        assert pattern in message, message
    return message


def test_missing_directory_and_missing_split(tmp_path):
    one_line_error(tmp_path / "nowhere", CorpusNotFoundError, "does not exist",
                   "ptb.train.txt", "train.txt")
    directory = write_corpus(tmp_path / "c", "a\n", "a\n", "a\n", prefix="ptb.")
    (directory / "ptb.test.txt").unlink()
    one_line_error(directory, CorpusNotFoundError, "the test split is missing",
                   f"{directory}/ptb.test.txt", f"{directory}/test.txt",
                   "found ptb.train.txt, ptb.valid.txt")
    assert issubclass(CorpusNotFoundError, FileNotFoundError)


def test_empty_blank_and_ambiguous_files(tmp_path):
    directory = write_corpus(tmp_path, "a\n", "", "a\n")
    one_line_error(directory, CorpusFileError, f"{directory / 'valid.txt'} is empty")
    (directory / "valid.txt").write_text("\n  \n")
    one_line_error(directory, CorpusFileError, "valid.txt is empty")
    (directory / "valid.txt").write_text("a\n")
    (directory / "ptb.valid.txt").write_text("a\n")
    one_line_error(directory, CorpusFileError, "both ptb.valid.txt and valid.txt exist")
    assert issubclass(CorpusFileError, ValueError)


def test_a_file_that_is_not_utf8_names_the_byte(tmp_path):
    directory = write_corpus(tmp_path, "a\n", "a\n", "a\n")
    (directory / "train.txt").write_bytes("ok\ncaf\xe9 au lait\n".encode("latin-1"))
    one_line_error(directory, CorpusFileError, f"{directory / 'train.txt'} is not UTF-8",
                   "byte offset 6, line 2", "iconv")
    # UTF-8 itself, with or without a byte-order mark, is read.
    (directory / "train.txt").write_text("\ufeffcafé\n", encoding="utf-8")
    assert load_corpus(directory).words == (UNK, "café", EOS)


def test_text_imports_without_tensorflow_or_keras():
    code = ("import sys, training.data.text, training.data.corpora; "
            "bad = [m for m in ('tensorflow', 'keras', 'jax', 'torch') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[1])
