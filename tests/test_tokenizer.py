"""zoo.char_lm.tokenizer.CharLMTokenizer: the language models' spelling rules in one object,
checked against Kim et al.'s rules written out here (START, the characters, END, zero padding;
`<eos>` spelled '+', `<unk>` '|'), and the same ids from every user: the corpus reader, the
SavedModel's TensorFlow speller, a loaded model, a saved and reloaded preset."""

import json

import numpy as np
import pytest

import zoo
from training.data.text import load_corpus
from zoo.char_lm.tokenizer import CharLMTokenizer

WORDS = ["<unk>", "the", "cat", "sat", "<eos>"]
CHARS = [" ", "{", "}", "+", "a", "c", "e", "h", "s", "t", "|"]


@pytest.fixture
def tokenizer():
    return CharLMTokenizer(WORDS, CHARS, max_word_length=6)


def _kim(word: str, width: int) -> list[int]:
    """Kim's spelling by hand: START 1, the characters' ids, END 2, PAD 0."""
    letters = {"<eos>": "+", "<unk>": "|"}.get(word, word)
    ids = [1, *(CHARS.index(c) for c in letters), 2]
    return ids + [0] * (width - len(ids))


def test_it_spells_words_as_kims_loader(tokenizer):
    words = ["cat", "<eos>", "<unk>", "that", "eat"]  # 'that' and 'eat': no word ids
    expected = np.array([_kim(w, 6) for w in words], np.int32)
    got = tokenizer(words)
    assert got.dtype == np.int32 and got.shape == (5, 6)
    np.testing.assert_array_equal(got, expected)
    assert [tokenizer.unspell(row) for row in got] == words


def test_reserved_characters_are_removed_as_the_corpus_reader_removes_them(tokenizer):
    np.testing.assert_array_equal(tokenizer(["{cat}", "c{a}t"]), tokenizer(["cat", "cat"]))
    assert tokenizer.token_to_id("{cat}") == tokenizer.token_to_id("cat") == 2


def test_word_ids_and_back(tokenizer):
    assert tokenizer.vocabulary_size() == 5 and tokenizer.get_vocabulary() == WORDS
    ids = tokenizer.word_ids(["the", "cat", "zebra", "<eos>"])
    assert ids.tolist() == [1, 2, 0, 4]  # a word outside the vocabulary: <unk>'s id
    assert tokenizer.detokenize(ids) == ["the", "cat", "<unk>", "<eos>"]
    with pytest.raises(ValueError, match="Word id 5 is outside the vocabulary of 5 words"):
        tokenizer.id_to_token(5)


def test_it_refuses_what_it_cannot_spell_naming_it(tokenizer):
    with pytest.raises(ValueError, match="'cheats' has 6 characters; at most 4 fit"):
        tokenizer.spell("cheats")
    with pytest.raises(ValueError, match="The character 'z' of 'zat' is not in"):
        tokenizer.spell("zat")
    # ... and says how to fix it: the characters it knows, or the lower case it has
    with pytest.raises(ValueError, match=f"it spells words with {''.join(CHARS[3:])!r}"):
        tokenizer.spell("zat")
    with pytest.raises(ValueError, match="'T' of 'The' .* it knows 't': write 'the'"):
        tokenizer.spell("The")
    with pytest.raises(ValueError, match="use a shorter word, or '<unk>'"):
        tokenizer.spell("cheats")
    for empty in ("", "{}"):  # nothing left to spell once '{' and '}' are removed
        with pytest.raises(ValueError, match="An empty word cannot be spelled"):
            tokenizer.spell(empty)
    assert tokenizer.missing_chars(["the", "zebra", "q"]) == ["b", "q", "r", "z"]
    with pytest.raises(ValueError, match="does not fit the model"):
        tokenizer.check_fits(classes=6, char_vocab_size=11)


@pytest.mark.parametrize("words, chars", [
    (WORDS, CHARS[1:]),  # no padding character first
    (["the", "<eos>"], CHARS),  # no <unk>
    (["the", "<unk>"], CHARS),  # no <eos>
])
def test_a_vocabulary_that_is_not_a_language_models_is_refused(words, chars):
    with pytest.raises(ValueError, match="not a language model's"):
        CharLMTokenizer(words, chars)


def test_its_config_is_json_and_model_jsons_vocabulary(tokenizer):
    config = json.loads(json.dumps(tokenizer.get_config()))
    assert config == {"words": WORDS, "chars": CHARS}
    again = CharLMTokenizer.from_config({**config, "max_word_length": 6})
    assert again == tokenizer
    np.testing.assert_array_equal(again(["sat"]), tokenizer(["sat"]))


def test_the_corpus_reader_spells_with_it(tmp_path):
    for split, text in (("train", "the cat sat\nthe {cat} ran\n"), ("valid", "a cat\n"),
                        ("test", "the <unk> sat\n")):
        (tmp_path / f"{split}.txt").write_text(text, encoding="utf-8")
    corpus = load_corpus(tmp_path)
    tokens = "the cat sat <eos> the cat ran <eos>".split()  # '{' and '}' removed
    np.testing.assert_array_equal(corpus.train.chars, corpus.tokenizer(tokens))
    np.testing.assert_array_equal(corpus.train.words, corpus.tokenizer.word_ids(tokens))
    assert corpus.tokenizer.max_word_length == corpus.max_word_length == 5


def test_the_savedmodels_speller_gives_the_tokenizers_ids(tokenizer):
    import tensorflow as tf

    from zoo.serving.language_model import Speller

    words = [["the", "{cat}", "<eos>"], ["<unk>", "eat", "sat"]]
    got = Speller(tokenizer)(tf.constant(words)).numpy()
    expected = [tokenizer(row) for row in words]  # '{' and '}' removed by both
    np.testing.assert_array_equal(got, np.stack(expected))


def test_a_shipped_model_has_its_tokenizer_and_a_preset_keeps_it(tmp_path):
    model = zoo.load("lstm_char_small_ptb", weights="default")
    tokenizer = model.tokenizer
    assert tokenizer.vocabulary_size() == 10_000 and len(tokenizer.chars) == 51
    assert tokenizer.max_word_length == 21 == model.inputs[0].shape[-1]
    assert model.vocabulary == tokenizer.get_config()  # model.json's "vocabulary"
    zoo.save(model, tmp_path / "preset")
    recorded = json.loads((tmp_path / "preset" / "model.json").read_text())["vocabulary"]
    assert recorded == tokenizer.get_config()
    assert zoo.load(str(tmp_path / "preset")).tokenizer == tokenizer
