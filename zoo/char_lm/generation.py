"""Text from a character-aware language model, the way keras-hub's `CausalLM.generate` writes it.

    model = zoo.load("lstm_char_small_ptb", weights="default")
    model.generate("the company said", max_length=20)                              # greedy
    model.generate("the company said", max_length=20, sampler="top_k", k=10, seed=0)

The prompt is read once by a stateful copy of the net (batch 1), and each new word is fed back
one step at a time with the LSTM states carried, so a word costs one step, not a re-read of the
text. `"greedy"` takes the most probable next word (the argmax of the words signature's
probabilities); `"top_k"` draws from the `k` most probable, renormalised (keras-hub's
`TopKSampler`), with NumPy's `Generator(seed)`, so a seed gives the same text on every backend.
A prompt is read as a sentence's start (after an `<eos>`, as PTB's text gives it), and the text
ends after `max_length` words, the prompt's included (keras-hub's `max_length`), or where the
net writes `stop_token` (`<eos>`, the end of a sentence; None: go on to `max_length`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from zoo.char_lm.builders import set_trained_weights, trained_weights
from zoo.char_lm.tokenizer import EOS

SAMPLERS = ("greedy", "top_k")


def _check(model, max_length, sampler, k) -> None:
    if model.metadata.get("family") != "char_lm":
        raise ValueError(f"{model.name} is not a language model: generate() writes text with "
                         "the lstm_char_* nets.")
    if getattr(model, "tokenizer", None) is None:
        raise ValueError(f"{model.name} has no tokenizer, so its word ids mean nothing: load "
                         "trained weights (weights='default', or a run directory) to generate.")
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}. "
                         f"Received: sampler={sampler!r}")
    if not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be a positive integer. Received: {max_length!r}")
    if sampler == "top_k" and (not isinstance(k, int) or k < 1):
        raise ValueError(f"k must be a positive integer. Received: k={k!r}")


def _log_probabilities(out: np.ndarray, probabilities: bool) -> np.ndarray:
    out = np.asarray(out, np.float64)
    if probabilities:
        return np.log(np.maximum(out, np.finfo(np.float64).tiny))
    top = out.max()
    return out - top - np.log(np.exp(out - top).sum())


class _Writer:
    """A stateful batch-1 copy of `model` that reads words and says what comes next."""

    def __init__(self, model):
        import zoo

        overrides = {k: v for k, v in model.overrides.items()
                     if k not in ("stateful", "batch_size")}
        self.net = zoo.load(model.architecture, stateful=True, batch_size=1, **overrides)
        set_trained_weights(self.net, trained_weights(model))
        self.tokenizer = model.tokenizer
        self.probabilities = \
            model.metadata["architecture_args"].get("classifier_activation") == "softmax"

    def reset(self) -> None:
        for layer in self.net.layers:
            if getattr(layer, "stateful", False):
                layer.reset_state()

    def read(self, words: Sequence[str]) -> np.ndarray:
        """The next word's log-probabilities after `words`, the states carried on."""
        chars = self.tokenizer(words)[None]
        out = self.net.predict_on_batch(chars)
        return _log_probabilities(np.asarray(out)[0, -1], self.probabilities)


def _next(log_probs: np.ndarray, sampler: str, k: int, rng: np.random.Generator) -> int:
    if sampler == "greedy":
        return int(np.argmax(log_probs))
    k = min(k, len(log_probs))
    top = np.argpartition(-log_probs, k - 1)[:k]
    weights = np.exp(log_probs[top] - log_probs[top].max())
    return int(top[rng.choice(k, p=weights / weights.sum())])


def generate(model, prompt: str | Sequence[str], max_length: int = 20, *,
             sampler: str = "greedy", k: int = 5, seed: int | None = None,
             stop_token: str | None = EOS) -> str | list[str]:
    """The prompt and the words the language model `model` writes after it.

    Args:
        model: a zoo language model with its vocabulary (`zoo.load(name,
            weights="default")`, or a run directory).
        prompt: words separated by spaces, or a list of such prompts (a list of texts back).
        max_length: words in all, the prompt's included (at least the prompt is returned).
        sampler: "greedy" (the most probable word) or "top_k" (drawn from the `k` most
            probable, renormalised).
        k: the candidates of "top_k".
        seed: "top_k"'s NumPy seed (None: fresh entropy); the same seed, the same text.
        stop_token: the word that ends the text (not returned); None: none does.
    """
    _check(model, max_length, sampler, k)
    writer = _Writer(model)  # one stateful copy, its states zeroed for each prompt
    if stop_token is not None and stop_token not in writer.tokenizer.words:
        raise ValueError(f"stop_token {stop_token!r} is not a word of this model; pass None "
                         "to stop at max_length only.")
    rng = np.random.default_rng(seed)  # one stream for a batch, drawn in order
    if not isinstance(prompt, str):
        return [_generate(writer, p, max_length, sampler, k, rng, stop_token) for p in prompt]
    return _generate(writer, prompt, max_length, sampler, k, rng, stop_token)


def _generate(writer, prompt, max_length, sampler, k, rng, stop_token) -> str:
    words = str(prompt).split()
    writer.reset()
    log_probs = writer.read([EOS, *words])
    while len(words) < max_length:
        word = writer.tokenizer.id_to_token(_next(log_probs, sampler, k, rng))
        if word == stop_token:
            break
        words.append(word)
        log_probs = writer.read([word])
    return " ".join(words)
