"""The language models' tokenizer: words to word ids and character ids, as keras-hub's
`Tokenizer` turns text into a model's ids.

    tokenizer = model.tokenizer                  # zoo.load(name, weights="default"), a run
    tokenizer(["the", "company", "said"])        # int32 [3, max_word_length]: the net's input
    tokenizer.token_to_id("company")             # its word id (the softmax's class)
    tokenizer.detokenize([12, 45])               # ["...", "..."]
    CharLMTokenizer.from_config(tokenizer.get_config())   # JSON: {"words": [...], "chars": [...]}

The spelling is Kim et al.'s (yoonkim/lstm-char-cnn, util/BatchLoaderUnk.lua): a word is
START, its characters, END, then zero padding to `max_word_length`; `<eos>` is spelled '+' and
`<unk>` '|'; '{' and '}' are reserved (START and END shown) and removed from a word, as the
corpus reader removes them from the text. Character ids: PAD 0, START 1,
END 2, then the characters of the corpus. Word ids are the training split's words, `<unk>`
among them: a word outside them has the id of `<unk>` but keeps its spelling, so the character
CNN still reads it. The corpus reader (`training.data.text`), `generate`, the SavedModel that
takes words (`zoo.serving.language_model`: the same rules as TensorFlow ops) and the per-token
analysis all spell words here.

Its config is the vocabulary a run's model.json, a preset's model.json and a shipped
`NAME.TAG.vocabulary.json` record (`{"words": [...], "chars": [...]}`): `zoo.load` gives a model its
tokenizer from there, and `zoo.save` writes it back. NumPy only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

EOS = "<eos>"
UNK = "<unk>"
PAD, START, END = 0, 1, 2  # character ids: zero padding, start-of-word '{', end-of-word '}'
# How the characters of a vocabulary are shown: Kim's ZEROPAD ' ', START '{', END '}'.
PAD_CHAR, START_CHAR, END_CHAR = " ", "{", "}"
# Single characters that spell the two special tokens for the character CNN (Kim's tokens).
EOS_CHAR, UNK_CHAR = "+", "|"
RESERVED = START_CHAR + END_CHAR  # removed from a text's tokens (Kim's loader does)
_WITHOUT_RESERVED = str.maketrans("", "", RESERVED)


def clean(word: str) -> str:
    """`word` without the reserved characters '{' and '}', as the corpus reader reads it."""
    return word.translate(_WITHOUT_RESERVED)


def spelling(word: str) -> str:
    """The characters that spell a cleaned `word` (`clean`) for the character CNN: its own, or
    Kim's single-character tokens for `<eos>` and `<unk>`."""
    if word == EOS:
        return EOS_CHAR
    if word == UNK:
        return UNK_CHAR
    return word


def character_vocabulary(tokens: Iterable[str]) -> tuple[str, ...]:
    """id -> character: PAD, START, END, then the sorted characters of every token, '+', '|'."""
    alphabet = {EOS_CHAR, UNK_CHAR}
    for token in set(tokens):  # a corpus: few words, many tokens
        alphabet.update(spelling(token))
    return (PAD_CHAR, START_CHAR, END_CHAR, *sorted(alphabet))


class CharLMTokenizer:
    """Words -> the character ids a `char_lm` net reads and the word ids it predicts.

    Args:
        words: id -> word, `<unk>` and `<eos>` among them.
        chars: id -> character: PAD, START and END shown as ' ', '{', '}', then the others.
        max_word_length: characters per word, START and END included (the net's input width);
            None: as long as the longest word asked for (`spell` needs it or a `width`).
    """

    def __init__(self, words: Sequence[str], chars: Sequence[str],
                 max_word_length: int | None = None):
        self.words, self.chars = tuple(words), tuple(chars)
        if self.chars[:END + 1] != (PAD_CHAR, START_CHAR, END_CHAR) or UNK not in self.words \
                or EOS not in self.words:
            raise ValueError("The vocabulary is not a language model's (padding, start and end "
                             "characters first; <unk> and <eos> among the words).")
        self.max_word_length = max_word_length
        self._word_ids = {w: i for i, w in enumerate(self.words)}
        # PAD, START and END are ids, not characters of the text: only ids 3.. are looked up.
        self._char_ids = {c: i for i, c in enumerate(self.chars) if i > END}

    # --- keras-hub's Tokenizer API -------------------------------------------------------

    def vocabulary_size(self) -> int:
        return len(self.words)

    def get_vocabulary(self) -> list[str]:
        return list(self.words)

    def token_to_id(self, word: str) -> int:
        """The word id of `word` (cleaned); the id of `<unk>` for a word outside the
        vocabulary."""
        return self._word_ids.get(clean(word), self._word_ids[UNK])

    def id_to_token(self, word_id: int) -> str:
        if not 0 <= int(word_id) < len(self.words):
            raise ValueError(f"Word id {word_id} is outside the vocabulary of "
                             f"{len(self.words)} words.")
        return self.words[int(word_id)]

    def __call__(self, words: Sequence[str]) -> np.ndarray:
        """The net's input for `words`: int32 [len(words), max_word_length]."""
        return self.tokenize(words)

    def tokenize(self, words: Sequence[str]) -> np.ndarray:
        """Each word spelled in character ids: int32 [len(words), max_word_length]."""
        width = self._width(words)
        return np.stack([self.spell(w, width) for w in words]) if len(words) \
            else np.zeros((0, width), np.int32)

    def word_ids(self, words: Sequence[str]) -> np.ndarray:
        """The word ids of `words` (the targets): int32 [len(words)]."""
        ids = {w: self.token_to_id(w) for w in set(words)}  # a corpus: few words, many tokens
        return np.fromiter((ids[w] for w in words), np.int32, len(words))

    def detokenize(self, word_ids: Iterable[int]) -> list[str]:
        return [self.id_to_token(i) for i in word_ids]

    def get_config(self) -> dict[str, Any]:
        """The vocabulary as model.json records it (the width is the net's input)."""
        return {"words": list(self.words), "chars": list(self.chars)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> CharLMTokenizer:
        return cls(config["words"], config["chars"], config.get("max_word_length"))

    # --- spelling ------------------------------------------------------------------------

    def spell(self, word: str, width: int | None = None) -> np.ndarray:
        """The character ids of one word: START, its characters, END, then PAD (int32
        [width], default `max_word_length`). A longer word, or a character without an id, is
        a ValueError that names it."""
        width = width or self.max_word_length
        word = clean(word)
        if not word:
            raise ValueError("An empty word cannot be spelled: give each word at least one "
                             f"character ({UNK!r} stands for an unknown word).")
        letters = spelling(word)
        if width is None:
            width = len(letters) + 2
        if len(letters) + 2 > width:
            raise ValueError(
                f"The word {word[:40]!r} has {len(letters)} characters; at most {width - 2} "
                f"fit (max_word_length {width}, start and end included): use a shorter word, "
                f"or {UNK!r} for it.")
        ids = np.full(width, PAD, np.int32)
        ids[0] = START
        try:
            ids[1:len(letters) + 1] = [self._char_ids[c] for c in letters]
        except KeyError as err:
            char = err.args[0]
            fix = (f"it knows {char.lower()!r}: write {word.lower()!r}"
                   if char.lower() != char and char.lower() in self._char_ids
                   else f"it spells words with {''.join(self.chars[END + 1:])!r}")
            raise ValueError(f"The character {char!r} of {word!r} is not in this model's "
                             f"character vocabulary; {fix}.") from None
        ids[len(letters) + 1] = END
        return ids

    def unspell(self, ids: Sequence[int]) -> str:
        """The token a row of character ids spells (START, characters, END, padding)."""
        ids = np.asarray(ids)
        spelled = "".join(self.chars[i] for i in ids[1:int(np.argmax(ids == END))])
        return {EOS_CHAR: EOS, UNK_CHAR: UNK}.get(spelled, spelled)

    def missing_chars(self, tokens: Iterable[str]) -> list[str]:
        """The characters of `tokens` this vocabulary cannot spell, sorted."""
        return sorted(set(character_vocabulary(tokens)[END + 1:]) - set(self.chars))

    def check_fits(self, classes: int, char_vocab_size: int) -> None:
        """Refuses a vocabulary whose sizes are not the net's."""
        if len(self.words) != classes or len(self.chars) != char_vocab_size:
            raise ValueError(
                f"The vocabulary ({len(self.words)} words, {len(self.chars)} characters) does "
                f"not fit the model ({classes} classes, char_vocab_size {char_vocab_size}).")

    def _width(self, words: Sequence[str]) -> int:
        if self.max_word_length is not None:
            return self.max_word_length
        return max((len(spelling(w)) for w in words), default=0) + 2

    def __eq__(self, other) -> bool:
        return isinstance(other, CharLMTokenizer) and (self.words, self.chars,
                                                       self.max_word_length) == (
            other.words, other.chars, other.max_word_length)

    def __repr__(self) -> str:
        return (f"CharLMTokenizer({len(self.words):,} words, {len(self.chars)} characters, "
                f"max_word_length={self.max_word_length})")
