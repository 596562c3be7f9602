"""The SavedModel of a character-aware language model: words in, next-word probabilities out.

A client sends words, not character ids: the model's tokenizer (`zoo.char_lm.tokenizer`, what
the model was trained with) is inside the graph as TensorFlow ops, built from its config, the
`vocabulary` the run directory records in `model.json` (`{"words": [...], "chars": [...]}`), so
the client needs nothing but strings. Per word, as the tokenizer spells it: its reserved
characters '{' and '}' removed (as the corpus reader does, `line_tokens`), `<eos>`
spelled '+', `<unk>` spelled '|', then START, the characters, END and zero padding to the
model's `max_word_length`. A word with a character outside the vocabulary, or longer than
`max_word_length - 2` characters, fails the request with the reader's message (the reader
refuses both too); a word outside the word vocabulary is read by its spelling, as in training.

Signatures, both taking ``words``: string ``[batch, time]`` (a sentence per row; pad short
rows at the end with any known word, e.g. ``<eos>``: the LSTM reads left to right, so what
follows a position does not change its output):

- ``serving_default``: ``probabilities`` float32 ``[batch, time, words]`` (the next word's
  distribution after each position), ``top_words`` string ``[batch, time, k]`` and
  ``top_probabilities`` float32 ``[batch, time, k]`` (k = `TOP_K`, or fewer words);
- ``logits``: ``logits`` float32 ``[batch, time, words]``.
"""

from __future__ import annotations

import re
from typing import Any

from zoo.char_lm.tokenizer import (
    END,
    EOS,
    EOS_CHAR,
    PAD,
    RESERVED,
    START,
    UNK,
    UNK_CHAR,
    CharLMTokenizer,
)

FAMILY = "char_lm"
INPUT_NAME = "words"
SIGNATURES = ("serving_default", "logits")
TOP_K = 5


def is_language_model(model) -> bool:
    """Whether `model` is a zoo character-aware language model (its metadata's family)."""
    return getattr(model, "metadata", {}).get("family") == FAMILY


def vocabulary_of(model) -> dict[str, list[str]]:
    """The model's words and characters, checked against its shape; a clear one-line refusal
    when it has none (random weights, a bare `.weights.h5`: the ids would mean nothing)."""
    vocabulary = getattr(model, "vocabulary", None)
    if vocabulary is None:
        raise ValueError(
            f"{model.name} is a language model with no vocabulary: its word and character ids "
            "mean nothing without the corpus it was trained on. Export a run directory of "
            "`highway-zoo train --corpus` (weights=RUN_DIR, --weights RUN_DIR), whose "
            "model.json records them.")
    args = model.metadata["architecture_args"]
    if not args.get("include_top", True):
        raise ValueError("A language model is served with its softmax; this one was built "
                         "with include_top=False (the embedder's features). Export it whole.")
    tokenizer = CharLMTokenizer.from_config(vocabulary)  # refuses one that is not an LM's
    tokenizer.check_fits(args["classes"], args["char_vocab_size"])
    return tokenizer.get_config()


def _max_word_length(model) -> int:
    return int(model.inputs[0].shape[-1])


class Speller:
    """A `CharLMTokenizer`'s spelling as TensorFlow ops: words [batch, time] -> character ids
    [batch, time, max_word_length]. `table` is the one resource to track in an archive."""

    def __init__(self, tokenizer: CharLMTokenizer):
        import tensorflow as tf

        self.width = tokenizer.max_word_length
        chars = list(tokenizer.chars)
        keys = tf.constant(chars[END + 1:])
        ids = tf.range(END + 1, len(chars), dtype=tf.int64)
        self.table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(keys, ids), default_value=-1)
        self.known = "".join(chars[END + 1:])  # said in the refusal: what to write instead

    def __call__(self, words):
        import tensorflow as tf

        shape = tf.shape(words)
        flat = tf.reshape(tf.strings.regex_replace(words, f"[{re.escape(RESERVED)}]", ""),
                          [-1])
        spelling = tf.where(flat == EOS, EOS_CHAR, tf.where(flat == UNK, UNK_CHAR, flat))
        chars = tf.strings.unicode_split(spelling, "UTF-8")  # [n, (characters)]
        ids = tf.ragged.map_flat_values(self.table.lookup, chars)
        too_long = chars.row_lengths() + 2 > self.width
        unknown = tf.reduce_any(ids < 0, axis=1)
        checks = [
            tf.debugging.Assert(tf.logical_not(tf.reduce_any(too_long)), [
                f"A word has more than {self.width - 2} characters (max_word_length "
                f"{self.width}, start and end included), as the reader refuses; use a "
                f"shorter word, or {UNK!r} for it:",
                tf.boolean_mask(flat, too_long)], summarize=5),
            tf.debugging.Assert(tf.logical_not(tf.reduce_any(unknown)), [
                "A word has a character that is not in the character vocabulary of this model "
                f"(it spells words with these characters: {self.known}):",
                tf.boolean_mask(flat, unknown)], summarize=5),
        ]
        with tf.control_dependencies(checks):
            n = tf.shape(flat, out_type=tf.int64)[:1]
            start = tf.RaggedTensor.from_row_lengths(tf.fill(n, tf.constant(START, tf.int64)),
                                                     tf.ones(n, tf.int64))
            end = tf.RaggedTensor.from_row_lengths(tf.fill(n, tf.constant(END, tf.int64)),
                                                   tf.ones(n, tf.int64))
            spelled = tf.concat([start, ids, end], axis=1).to_tensor(
                default_value=PAD, shape=[None, self.width])
        return tf.reshape(tf.cast(spelled, tf.int32), tf.concat([shape, [self.width]], 0))


def signature_fns(model, vocabulary: dict[str, list[str]], max_batch: int | None = None):
    """The endpoint functions (each taking `words`, returning named tensors) and the lookup
    table they use."""
    import keras
    import tensorflow as tf

    speller = Speller(CharLMTokenizer(vocabulary["words"], vocabulary["chars"],
                                      _max_word_length(model)))
    words = tf.constant(vocabulary["words"])
    k = min(TOP_K, len(vocabulary["words"]))
    logits_layer = model.get_layer("logits")
    output = model.outputs[0]
    has_probabilities = output is not logits_layer.output
    heads = keras.Model(model.inputs[0], {"logits": logits_layer.output, "output": output})

    def chars_of(batch):
        if max_batch is not None:
            within = tf.debugging.assert_less_equal(
                tf.shape(batch, out_type=tf.int64)[0], tf.constant(max_batch, tf.int64),
                message=f"A request may hold at most {max_batch} sentences (this export's max "
                "batch); split it, or export again with a larger --max-batch.")
            with tf.control_dependencies([within]):
                batch = tf.identity(batch)
        return speller(batch)

    def serving_default(words_in):
        out = heads(chars_of(words_in), training=False)
        probabilities = out["output"] if has_probabilities else tf.nn.softmax(out["logits"])
        top = tf.math.top_k(probabilities, k=k)
        return {"probabilities": probabilities, "top_words": tf.gather(words, top.indices),
                "top_probabilities": top.values}

    def logits(words_in):
        return {"logits": heads(chars_of(words_in), training=False)["logits"]}

    return {"serving_default": serving_default, "logits": logits}, speller.table


def build_archive(model, vocabulary: dict[str, list[str]], max_batch: int | None = None):
    """A `keras.export.ExportArchive` of `model` with the signatures above (words in, the
    speller's lookup table tracked), and the signatures' names."""
    import keras
    import tensorflow as tf

    spec = [tf.TensorSpec([None, None], tf.string, name=INPUT_NAME)]
    archive = keras.export.ExportArchive()
    archive.track(model)
    fns, table = signature_fns(model, vocabulary, max_batch)
    archive.track(table)
    for endpoint, fn in fns.items():
        archive.add_endpoint(endpoint, fn, input_signature=spec)
    return archive, list(fns)


def warmup_requests(name: str, signatures=SIGNATURES) -> list:
    """One `PredictionLog` per signature: one sentence of one word, `<unk>` (always known)."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

    logs = []
    for signature in signatures:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = name
        request.model_spec.signature_name = signature
        request.inputs[INPUT_NAME].CopyFrom(tf.make_tensor_proto([[UNK]]))
        logs.append(prediction_log_pb2.PredictionLog(
            predict_log=prediction_log_pb2.PredictLog(request=request)))
    return logs


def input_record(model, vocabulary: dict[str, list[str]]) -> dict[str, Any]:
    """The export record's description of the ``words`` input: name, dtype, shape and the
    vocabulary's sizes."""
    return {"name": INPUT_NAME, "dtype": "string", "shape": [None, None],
            "values": "words, a sentence per row (training.data.text's tokens; <eos> ends a "
                      "sentence, <unk> is the unknown word)",
            "vocabulary": {"words": len(vocabulary["words"]), "chars": len(vocabulary["chars"]),
                           "max_word_length": _max_word_length(model)}}


def output_record(vocabulary: dict[str, list[str]]) -> dict[str, dict[str, str]]:
    """The export record's description of each signature's outputs, their dtypes and shapes."""
    k = min(TOP_K, len(vocabulary["words"]))
    return {
        "serving_default": {"probabilities": "float32 [batch, time, words]",
                            "top_words": f"string [batch, time, {k}]",
                            "top_probabilities": f"float32 [batch, time, {k}]"},
        "logits": {"logits": "float32 [batch, time, words]"},
    }
