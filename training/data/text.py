"""Text corpora in Mikolov's format for word-level language models with character inputs.

A corpus is a directory holding three plain UTF-8 text files, one sentence (or line) per line,
tokens separated by whitespace, rare words already replaced by `<unk>`:

    ptb.train.txt  ptb.valid.txt  ptb.test.txt      (Mikolov's Penn Treebank names), or
    train.txt      valid.txt      test.txt          (any other corpus; yoonkim/lstm-char-cnn's)

`load_corpus(directory)` reads it the way Kim et al.'s loader does (yoonkim/lstm-char-cnn,
util/BatchLoaderUnk.lua): an end-of-sentence token `<eos>` after every line, spelled with the
single character '+' for the character CNN (their `-EOS '+'`); `<unk>` spelled '|'; every token
spelled as START '{', its characters, END '}', then zero padding; '{' and '}' in the text are
removed, as Kim does, because they are reserved. Where this module differs from Kim's code:

- word ids come from the training split only (Kim also adds valid/test words; for PTB the
  result is the same, since its valid and test words all occur in training); a word the
  training split lacks gets the id of `<unk>` but keeps its own spelling, so the character
  CNN still sees it;
- character ids are PAD 0, START 1, END 2, then the sorted characters of all three splits
  (Kim: order of first appearance), '+' and '|' always among them;
- a word longer than `max_word_length` is an error (Kim cuts it silently);
- `bptt_batches` drops the tail of a split that does not fill a batch, also for the test split,
  and never wraps the last target round to the first token (Kim's `ydata[-1] = data[1]`).

Word ids are in Kim's order: `<unk>` first, then the training words in order of first
appearance (`<eos>` where the first line ends). NumPy only: this module imports without
TensorFlow or Keras.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path

import numpy as np

# How the language models spell a word: their tokenizer's rules (zoo/char_lm/tokenizer.py).
from zoo.char_lm.tokenizer import EOS, UNK, CharLMTokenizer, clean, spelling
from zoo.char_lm.tokenizer import character_vocabulary as _characters

SPLITS = ("train", "valid", "test")


class CorpusNotFoundError(FileNotFoundError):
    """A corpus directory, or one of its three split files, is missing."""


class CorpusFileError(ValueError):
    """A corpus file is empty, not UTF-8, or holds a word longer than the limit."""


@dataclasses.dataclass(frozen=True)
class Split:
    """One split as aligned arrays, one row per token (`<eos>` included)."""

    words: np.ndarray  # int32 [n_tokens]: word ids (the targets); unknown words -> id of UNK
    chars: np.ndarray  # int32 [n_tokens, max_word_length]: START, the chars, END, then PAD

    def __len__(self) -> int:
        return len(self.words)


@dataclasses.dataclass(frozen=True)
class Corpus:
    """A loaded corpus: vocabularies and the three splits."""

    name: str
    directory: str
    words: tuple[str, ...]  # id -> word; from the training split only; UNK and EOS included
    chars: tuple[str, ...]  # id -> char; PAD, START, END, then the sorted chars of all splits
    train: Split
    valid: Split
    test: Split
    max_word_length: int  # longest token + 2 (start/end) over all splits, or the limit given

    # Derived from `words`, `chars` and `max_word_length` (not a field: equality and repr
    # skip it).
    tokenizer: CharLMTokenizer = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "tokenizer",
                           CharLMTokenizer(self.words, self.chars, self.max_word_length))

    def split(self, name: str) -> Split:
        if name not in SPLITS:
            raise ValueError(f"Unknown split {name!r}; expected one of {', '.join(SPLITS)}.")
        return getattr(self, name)

    def word_id(self, word: str) -> int:
        """The id of `word`; the id of UNK for a word the training split lacks."""
        return self.tokenizer.token_to_id(word)

    def spell(self, word: str) -> np.ndarray:
        """The character ids of one word: START, its characters, END, then PAD (int32)."""
        return _spell(self.tokenizer, word)

    @property
    def num_words(self) -> int:
        return len(self.words)

    @property
    def num_chars(self) -> int:
        return len(self.chars)


def _spell(tokenizer: CharLMTokenizer, word: str) -> np.ndarray:
    try:
        return tokenizer.spell(word)
    except ValueError as err:
        raise CorpusFileError(str(err)) from None


def split_files(directory: str | os.PathLike) -> dict[str, Path]:
    """{split: file} of a corpus directory: `ptb.<split>.txt` or `<split>.txt` for each split."""
    directory = Path(directory)
    if not directory.is_dir():
        what = "is not a directory" if directory.exists() else "does not exist"
        raise CorpusNotFoundError(
            f"Corpus directory {directory} {what}: give a directory holding ptb.train.txt, "
            "ptb.valid.txt and ptb.test.txt (or train.txt, valid.txt and test.txt), one sentence "
            "per line (`highway-zoo prepare-text` makes one).")
    files = {}
    for split in SPLITS:
        found = [directory / n for n in (f"ptb.{split}.txt", f"{split}.txt")
                 if (directory / n).is_file()]
        if not found:
            present = sorted(p.name for p in directory.iterdir() if p.suffix == ".txt")
            raise CorpusNotFoundError(
                f"{directory}: the {split} split is missing: put it in {directory}/ptb.{split}.txt "
                f"or {directory}/{split}.txt (a corpus needs train, valid and test; found "
                f"{', '.join(present) or 'no .txt file'}).")
        if len(found) == 2:
            raise CorpusFileError(
                f"{directory}: both ptb.{split}.txt and {split}.txt exist; keep one of them.")
        files[split] = found[0]
    return files


def read_lines(path: Path) -> list[list[str]]:
    """The lines of a split file as lists of tokens ('{' and '}' removed, as Kim does)."""
    data = path.read_bytes()
    if not data.strip():
        raise CorpusFileError(f"{path} is empty: put the split's text there, one sentence per "
                              "line, words separated by spaces.")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        byte = data[err.start:err.start + 1]
        raise CorpusFileError(
            f"{path} is not UTF-8 (byte offset {err.start}, line {line}: {byte!r}): convert it to "
            "UTF-8, e.g. `iconv -f latin1 -t utf-8`.") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark is not a character of the text
    lines = [line_tokens(line) for line in text.splitlines()]
    if not any(lines):
        raise CorpusFileError(f"{path} has no words, only blank lines: put the split's text "
                              "there, one sentence per line.")
    return lines


def line_tokens(line: str) -> list[str]:
    """The tokens of one line: split on whitespace, '{' and '}' removed (reserved, as in Kim's)."""
    return clean(line).split()


def _tokens(lines: dict[str, list[list[str]]]):
    return itertools.chain.from_iterable(itertools.chain.from_iterable(lines.values()))


def character_vocabulary(lines: dict[str, list[list[str]]]) -> tuple[str, ...]:
    """id -> character: PAD, START, END, then the sorted characters of every token, '+', '|'."""
    return _characters(_tokens(lines))


def word_length_limit(lines: dict[str, list[list[str]]], files: dict[str, str | os.PathLike],
                      max_word_length: int | None = None) -> int:
    """The characters per token (longest token + 2 for start and end), checked against a limit.

    `lines`: {split: lines of tokens}; `files`: {split: the file those lines are read from or
    written to}, named with the line number in the error a longer word raises.
    """
    longest = {}  # split -> (characters, word, line number) of its longest token
    for split, split_lines in lines.items():
        best = (0, "", 0)
        for number, tokens in enumerate(split_lines, 1):
            for token in tokens:
                if len(spelling(token)) > best[0]:
                    best = (len(spelling(token)), token, number)
        longest[split] = best
    needed = max(length for length, _, _ in longest.values()) + 2
    if max_word_length is None:
        return needed
    if needed > max_word_length:
        split = max(longest, key=lambda s: longest[s][0])
        length, word, number = longest[split]
        raise CorpusFileError(
            f"{files[split]}, line {number}: the word {word[:40]!r} has {length} characters, more "
            f"than max_word_length {max_word_length} allows ({max_word_length - 2} + start and "
            f"end): raise max_word_length to {needed} or shorten the word in the file.")
    return max_word_length


def load_corpus(directory: str | os.PathLike, *, max_word_length: int | None = None,
                name: str | None = None,
                vocabulary: dict[str, list[str]] | None = None) -> Corpus:
    """Loads a Mikolov-format corpus from `directory` (see the module docstring).

    Args:
        directory: holds `ptb.{train,valid,test}.txt` or `{train,valid,test}.txt`.
        max_word_length: characters per token, start and end included; a longer token is an
            error. Default: the longest token of the three splits + 2.
        name: the corpus's name; default the one its corpus.json records (`highway-zoo
            prepare-text` writes it), else the directory's name.
        vocabulary: `{"words": [...], "chars": [...]}`, a trained model's (its run's
            model.json): the text is read with those ids, to go on training that model (a
            word it lacks is `<unk>`; a character it lacks is an error). Default: the
            corpus's own, as above.
    """
    files = split_files(directory)
    lines = {split: read_lines(path) for split, path in files.items()}

    max_word_length = word_length_limit(lines, files, max_word_length)

    if vocabulary is not None:
        tokenizer = _given_vocabulary(vocabulary, lines, directory, max_word_length)
    else:
        # Kim's order: UNK first, then the training words as they first appear (EOS at a
        # line's end).
        word_ids = {UNK: 0}
        for tokens in lines["train"]:
            for token in (*tokens, EOS):
                word_ids.setdefault(token, len(word_ids))
        tokenizer = CharLMTokenizer(tuple(word_ids), character_vocabulary(lines),
                                    max_word_length)
    return Corpus(
        name=name or _recorded_name(directory) or Path(directory).resolve().name,
        directory=str(directory),
        words=tokenizer.words,
        chars=tokenizer.chars,
        max_word_length=max_word_length,
        **{split: _encode(split_lines, tokenizer) for split, split_lines in lines.items()},
    )


def _recorded_name(directory: str | os.PathLike) -> str | None:
    """The name in the directory's corpus.json, if it has a readable one."""
    import json

    try:
        name = json.loads((Path(directory) / "corpus.json").read_text(encoding="utf-8"))["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) and name else None


def _given_vocabulary(vocabulary: dict[str, list[str]], lines: dict[str, list[list[str]]],
                      directory, max_word_length: int) -> CharLMTokenizer:
    """A model's tokenizer, checked against a text it is to read."""
    tokenizer = CharLMTokenizer(vocabulary["words"], vocabulary["chars"], max_word_length)
    missing = tokenizer.missing_chars(_tokens(lines))
    if missing:
        raise CorpusFileError(
            f"{directory}: the characters {''.join(missing)[:40]!r} are not in the model's "
            "character vocabulary, so it cannot read this text; remove or replace them.")
    return tokenizer


def _encode(lines: list[list[str]], tokenizer: CharLMTokenizer) -> Split:
    """Word ids and spellings of every token, `<eos>` after each line."""
    tokens = [token for line in lines for token in (*line, EOS)]
    words = tokenizer.word_ids(tokens)
    # Spell each distinct word once, then gather: PTB's 930k tokens are 10k words.
    distinct: dict[str, int] = {}
    index = np.fromiter((distinct.setdefault(t, len(distinct)) for t in tokens), np.int64,
                        len(tokens))
    spellings = np.stack([_spell(tokenizer, w) for w in distinct])
    return Split(words=words, chars=spellings[index])


def bptt_layout(n_tokens: int, batch_size: int = 20, steps: int = 35) -> tuple[int, int]:
    """(number of batches, tokens dropped) of `bptt_batches` on a split of `n_tokens` tokens.

    Inputs are the first n_batches * batch_size * steps tokens; each target is the token after
    its input, so one token more is read; what follows is dropped.
    """
    if batch_size < 1 or steps < 1:
        raise ValueError(f"batch_size and steps must be positive; got {batch_size}, {steps}.")
    n_batches = max(n_tokens - 1, 0) // (batch_size * steps)
    used = n_batches * batch_size * steps
    return n_batches, n_tokens - used - (1 if n_batches else 0)


def bptt_batches(split: Split, batch_size: int = 20,
                 steps: int = 35) -> tuple[np.ndarray, np.ndarray]:
    """Kim's and Zaremba's contiguous layout for truncated backpropagation through time.

    The token stream is cut into `batch_size` contiguous rows of equal length (the tail that
    does not fill a batch is dropped: `bptt_layout` says how many tokens); batch k is steps
    k*steps..(k+1)*steps of every row. Returns:

        inputs:  int32 [n_batches * batch_size, steps, max_word_length]  the tokens' characters
        targets: int32 [n_batches * batch_size, steps]  the word id of the token after each input

    Rows [k*batch_size:(k+1)*batch_size] are batch k, and row i of batch k continues row i of
    batch k-1, so a stateful LSTM carries its state across batches: `fit(inputs, targets,
    batch_size=batch_size, shuffle=False)`.
    """
    n_batches, dropped = bptt_layout(len(split.words), batch_size, steps)
    if n_batches == 0:
        raise CorpusFileError(
            f"A split of {len(split.words)} tokens is too short for one batch of {batch_size} rows "
            f"x {steps} steps ({batch_size * steps + 1} tokens needed): use a smaller batch size "
            "or fewer steps, or a longer text.")
    n = n_batches * batch_size * steps
    # positions[b, k, t]: the stream position of step t of row b in batch k.
    positions = np.arange(n).reshape(batch_size, n_batches, steps)
    positions = positions.transpose(1, 0, 2).reshape(n_batches * batch_size, steps)
    return split.chars[positions], split.words[positions + 1]
