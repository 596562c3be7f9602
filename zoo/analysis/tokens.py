"""Per-token gate activity of a character-aware language model: which words its highway layers
carry and which they transform, by word frequency, length and class. The text counterpart of
NIPS 2015 Fig. 3 (mean T per image class), which no paper shows for text.

The gates sit in the token embedder (`layers.CharCNNEmbedder`: character CNN, then highway
layers), before the LSTM, so a token's gate values depend on its spelling alone, never on its
context. They are therefore computed once per distinct word type of the split and weighted by
the type's count in the split: every occurrence of a type has the same values, and a mean over
tokens is the count-weighted mean over types. The LSTM and the softmax are not run.

Which gate: T for the variants that learn it (coupled, full, t_only; 0 carries, 1
transforms) and for `gru_gate`, whose T is GTrXL's update gate z (out = z·g + (1 - z)·x: 0
carries, 1 transforms, as T); C for `c_only`, which learns only the carry gate (1 carries).
Full learns both, each on its own (y = H·T + x·C): its T says how much of H passes and its C
how much of x, so either can be asked for (`gate=`, T by default), and its words are ranked by
the gate's value instead of being called carried or transformed by one gate alone.
`residual` and `plain` have no gate, and are refused with a message
(`layers.variants.LEARNED_BRANCHES`); so are the static skips (rezero, layerscale, laurel_rw,
laurel_lr: `layers.variants.no_routing`, one line), which scale every token alike.

What the gates do, rather than what they are (`gate="share"`): the transform path's share of
a word's output, Σ|T·H| / Σ(|T·H| + |C·x|) summed over the layer's units (0: only the input
passes, 1: only H does), one value per word and layer. A gate alone does not say which path
dominates: Full can close T and C together, and H and x differ in size. Summed over units, a
unit whose output is 0 on both paths (H = 0 where T = 1) weighs nothing; a word whose output
is 0 on every unit gets the gates' split, ΣT / Σ(T + C) (1 for Plain). The share is measured
for every variant whose output is y = H·T + x·C: Residual's (T = C = 1) and Plain's (C = 0, so
1 for every word) included; gru_gate (its candidate is not H) is refused. With it the report
gives how often H is exactly 0 (a ReLU that does not fire), per token and unit, and the
tokens whose H is 0 on every unit (`silent_h`): a Plain layer outputs 0 for those.

Groups (every token of the split in exactly one group of each grouping):

- frequency: the word's count in the training split, in log-spaced bins (1, 2-3, 4-9, 10-99,
  100-999, 1000+), and "unseen" for a word the training split lacks (`load_corpus` gives it
  the word id of `<unk>` but keeps its spelling, so the CNN reads it);
- length: the characters of the word; `<eos>` and `<unk>` are left out (the CNN reads them as
  the single characters '+' and '|', Kim et al.'s convention);
- class, with no tagger (none with offline models here): `<unk>`, `<eos>`, number (PTB's `N`,
  or a token of digits and . , : / -), function word (scikit-learn's
  `sklearn.feature_extraction.text.ENGLISH_STOP_WORDS`, 318 words from the Glasgow
  Information Retrieval Group's stop list, matched in lower case; PTB's clitics such as
  "'s" and "n't" are not in it), content word (every other token).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from layers.variants import INPUT_GATED_SKIPS, LEARNED_BRANCHES, STATIC_SKIPS, no_routing
from zoo.char_lm.tokenizer import EOS, UNK, CharLMTokenizer
from zoo.files import atomic_path, jsonable, write_text


class Split(Protocol):
    """What is read of a split (`training.data.text.Split`): word ids and their characters."""

    words: np.ndarray
    chars: np.ndarray


class Corpus(Protocol):
    """What is read of a loaded corpus (`training.data.text.load_corpus`); zoo reads a corpus
    the reader made and does not import training."""

    directory: str
    chars: tuple[str, ...]
    tokenizer: CharLMTokenizer
    train: Split

    @property
    def num_chars(self) -> int:
        """The number of character ids, padding included."""

    def split(self, name: str) -> Split:
        """The split called `name` ("train", "valid" or "test")."""


TOKENS_FILE = "tokens.json"
TOKENS_FIGURE = "tokens.png"
TOKENS_TABLE = "tokens.md"

# (label, lowest, highest) training-split counts, both inclusive.
FREQUENCY_BINS = (("unseen", 0, 0), ("1", 1, 1), ("2-3", 2, 3), ("4-9", 4, 9),
                  ("10-99", 10, 99), ("100-999", 100, 999), ("1000+", 1000, math.inf))
CLASSES = ("<unk>", "<eos>", "number", "function word", "content word")
_NUMBER = re.compile(r"[\d.,:/-]*\d[\d.,:/-]*")
_NUMBERS = re.compile(r"\[[\s\d.,eE+\-nul]*\]")  # a JSON list of numbers (and nulls)
HISTOGRAM_BINS = 40
DPI = 100


def char_embedder(model):
    """The `CharCNNEmbedder` of a character-aware language model (or the embedder itself)."""
    from layers import CharCNNEmbedder

    if isinstance(model, CharCNNEmbedder):
        return model
    found = [layer for layer in getattr(model, "layers", []) if isinstance(layer, CharCNNEmbedder)]
    if not found:
        raise ValueError(
            f"{getattr(model, 'name', model)!r} is not a character-aware language model: it "
            "has no CharCNNEmbedder, whose highway layers read each word's spelling. Per-token "
            "gates need a char LM (zoo.list_models('lstm_char_*')).")
    return found[0]


SHARE = "share"  # not a gate: the transform path's share of a word's output (module docstring)
SHARE_VARIANTS = ("coupled", "full", "t_only", "c_only", "residual", "plain")


def _gates_of(variant: str) -> tuple[str, ...]:
    """The gates a variant's layers have, lower case: "t" for gru_gate (its update gate z)."""
    return ("t",) if variant in INPUT_GATED_SKIPS else LEARNED_BRANCHES[variant][1:]


def _both_gates(variant: str) -> bool:
    """Whether the variant learns T and C each on its own (full): neither alone carries."""
    return set(_gates_of(variant)) == {"t", "c"}


def _word_lists(gate: str, variant: str) -> tuple[str, str]:
    """Headings of the report's two word lists, `most_carried` and `most_transformed`."""
    if gate == SHARE or not _both_gates(variant):
        return "Most carried words", "Most transformed words"
    passes = "H" if gate == "T" else "the input"
    lowest, highest = (f"Words of lowest {gate}, where least of {passes} passes",
                       f"Words of highest {gate}, where most of {passes} passes")
    return (lowest, highest) if gate == "T" else (highest, lowest)


def gate_of(variant: str) -> str | None:
    """The gate reported for a variant: "T" where it is learned (gru_gate: its update gate z),
    "C" for c_only, else None."""
    gates = _gates_of(variant)
    return "T" if "t" in gates else "C" if "c" in gates else None


def word_class(word: str) -> str:
    """One of `CLASSES` (see the module docstring)."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    if word in (UNK, EOS):
        return word
    if word == "N" or _NUMBER.fullmatch(word):
        return "number"
    return "function word" if word.lower() in ENGLISH_STOP_WORDS else "content word"


def frequency_bin(train_count: int) -> str:
    """The label of the `FREQUENCY_BINS` entry that holds a training-split count."""
    return next(label for label, low, high in FREQUENCY_BINS if low <= train_count <= high)


def word_types(split: Split, tokenizer: CharLMTokenizer):
    """(types, rows, counts, token_type): the distinct spellings of a split, their character
    ids, how often each occurs, and each token's index into `types`."""
    rows, token_type, counts = np.unique(split.chars, axis=0, return_inverse=True,
                                         return_counts=True)
    return ([tokenizer.unspell(row) for row in rows], rows, counts.astype(np.int64),
            token_type.reshape(-1))


@dataclasses.dataclass(frozen=True)
class TokenGates:
    """Gate values per word type of one split, and how the split's tokens map onto the types."""

    gate: str  # "T", "C" or SHARE
    variant: str
    layers: list[str]  # the embedder's highway layers
    types: list[str]  # distinct words of the split, as spelled
    counts: np.ndarray  # int64 [types]: occurrences in the split
    train_counts: np.ndarray  # int64 [types]: occurrences in the training split
    values: np.ndarray  # float32 [types, layers, units]: the gate per unit
    token_type: np.ndarray  # int64 [tokens]: each token's type
    silent: np.ndarray | None = None  # float32 [types, layers, units] with SHARE: 1 where H is 0

    @property
    def type_means(self) -> np.ndarray:
        """[types, layers]: the gate's mean over units."""
        return self.values.mean(axis=-1)

    def per_token(self) -> np.ndarray:
        """[tokens, layers]: each token's mean gate over units (its type's, repeated)."""
        return self.type_means[self.token_type]

    @property
    def classes(self) -> list[str]:
        return [word_class(word) for word in self.types]

    @property
    def frequency_bins(self) -> list[str]:
        return [frequency_bin(int(n)) for n in self.train_counts]

    @property
    def lengths(self) -> list[int | None]:
        """Characters per type; None for `<eos>` and `<unk>` (spelled by one symbol)."""
        return [None if word in (EOS, UNK) else len(word) for word in self.types]


def _measure(layer, x, gate: str) -> np.ndarray:
    """One highway layer's `gate` at its input x: [words, units] of "T" or "C", [words, 1] of
    `SHARE`, or [words, units] of whether H is 0 ("silent")."""
    from keras import ops

    if gate in ("T", "C"):
        read = {"T": layer.transform_gate, "C": layer.carry_gate}[gate]
        return ops.convert_to_numpy(read(x)).astype(np.float32)
    h = ops.convert_to_numpy(layer.block_state(x)).astype(np.float64)
    if gate == "silent":
        return (h == 0).astype(np.float32)
    t, c = (ops.convert_to_numpy(f(x)).astype(np.float64)
            for f in (layer.transform_gate, layer.carry_gate))
    transformed = np.abs(t * h).sum(axis=-1, keepdims=True)
    both = transformed + np.abs(c * ops.convert_to_numpy(x)).sum(axis=-1, keepdims=True)
    # Nothing passes either way: the gates' split is all there is to say.
    split = t.sum(axis=-1, keepdims=True) / (t + c).sum(axis=-1, keepdims=True)
    return np.where(both > 0, transformed / np.where(both > 0, both, 1), split).astype(np.float32)


def embedder_gates(embedder, chars: np.ndarray, gate: str = "T",
                   batch_size: int = 1024) -> np.ndarray:
    """[words, layers, units]: the `gate` ("T" or "C") of each highway layer of `embedder` for
    each row of character ids, computed in batches; [words, layers, 1] of `SHARE`, the
    transform path's share of the word's output; or "silent": whether H is 0, per unit.

    The highway layers' input is the embedder's own output with all of them lesioned (each
    returns its input: `zoo.analysis.lesioned`), i.e. the pooled CNN features; each layer's
    gate is then read from its input, and its output feeds the next layer.
    """
    return _embedder_measures(embedder, chars, (gate,), batch_size)[0]


def _embedder_measures(embedder, chars: np.ndarray, measures: tuple[str, ...],
                       batch_size: int) -> list[np.ndarray]:
    """`embedder_gates` of each of `measures`, all in one pass over the words."""
    from zoo.analysis.lesion import lesioned

    layers = embedder.highways
    batches = {measure: [] for measure in measures}
    for start in range(0, len(chars), batch_size):
        batch = np.asarray(chars[start:start + batch_size], np.int32)
        with lesioned(*layers):
            x = embedder(batch)
        per_layer = {measure: [] for measure in measures}
        for layer in layers:
            for measure in measures:
                per_layer[measure].append(_measure(layer, x, measure))
            x = layer(x)
        for measure in measures:
            batches[measure].append(np.stack(per_layer[measure], axis=1))
    return [np.concatenate(batches[measure]) for measure in measures]


def token_gates(model, corpus: Corpus, split: str = "test", *, gate: str | None = None,
                batch_size: int = 1024) -> TokenGates:
    """The gate activity of every token of `corpus`'s `split` under a trained char LM.

    Args:
        model: a character-aware language model (`zoo.load(RUN_DIR)`) or its
            `CharCNNEmbedder`, trained on `corpus`'s character vocabulary.
        corpus: a loaded corpus (`training.data.text.load_corpus`); its training split gives
            the word frequencies.
        split: "train", "valid" or "test".
        gate: "T" or "C"; default T where the variant learns it, C for c_only. Or `SHARE`:
            the transform path's share of each word's output (module docstring).
        batch_size: word types per forward pass.
    """
    embedder = char_embedder(model)
    if not embedder.highways:
        raise ValueError(f"{embedder.name} has no highway layers (highway_layers=0): no gates "
                         "to read.")
    variant = embedder.highway_variant
    if variant in STATIC_SKIPS:
        raise ValueError(f"{no_routing(variant)}.")
    if gate == SHARE and variant not in SHARE_VARIANTS:
        raise ValueError(
            f"The highway layers of {embedder.name} are variant {variant!r}: its output is not "
            f"H·T + x·C, so H's share of it is not defined. The share is measured for "
            f"{', '.join(SHARE_VARIANTS)}.")
    gate = gate or gate_of(variant)
    if gate is None:
        raise ValueError(
            f"The highway layers of {embedder.name} are variant {variant!r}, which has no gate "
            f"({'y = H(x) + x' if variant == 'residual' else 'y = H(x)'}): T and C are constants, "
            "so no token is carried more than another.")
    if gate != SHARE and (gate not in ("T", "C") or gate.lower() not in _gates_of(variant)):
        raise ValueError(f"gate must be one the variant {variant!r} learns "
                         f"({', '.join(b.upper() for b in _gates_of(variant))}), or "
                         f"{SHARE!r}. Received: gate={gate!r}")
    if embedder.char_vocab_size != corpus.num_chars:
        raise ValueError(
            f"The model reads {embedder.char_vocab_size} character ids; the corpus "
            f"{corpus.directory} has {corpus.num_chars}. Give the corpus it was trained on.")
    data = corpus.split(split)
    types, rows, counts, token_type = word_types(data, corpus.tokenizer)
    train_types, _, train_counts, _ = word_types(corpus.train, corpus.tokenizer)
    in_training = dict(zip(train_types, train_counts.tolist()))
    measures = (gate, "silent") if gate == SHARE else (gate,)
    values, *silent = _embedder_measures(embedder, rows, measures, batch_size)
    return TokenGates(
        gate=gate, variant=variant, layers=[layer.name for layer in embedder.highways],
        types=types, counts=counts,
        train_counts=np.array([in_training.get(w, 0) for w in types], np.int64),
        values=values, token_type=token_type, silent=silent[0] if silent else None)


def _group(name: str, selected: np.ndarray, gates: TokenGates) -> dict[str, Any]:
    """Token-weighted means of the types in `selected` (a boolean mask over types)."""
    weights = gates.counts[selected].astype(np.float64)
    per_unit = np.tensordot(weights, gates.values[selected].astype(np.float64), axes=1)
    per_unit /= weights.sum()
    return {"group": name, "tokens": int(weights.sum()), "types": int(selected.sum()),
            "mean": per_unit.mean(axis=-1).tolist(), "per_unit": per_unit.tolist()}


def _grouped(labels: list, order, gates: TokenGates) -> list[dict[str, Any]]:
    labels = np.array(labels, dtype=object)
    return [_group(str(name), labels == name, gates) for name in order
            if np.any(labels == name)]


def _ranked(gates: TokenGates, min_count: int, top: int, carried: bool) -> list[dict]:
    means = gates.type_means
    overall = means.mean(axis=1)
    frequent = [i for i in range(len(gates.types)) if gates.train_counts[i] >= min_count]
    # Low T carries; high C carries.
    reverse = (gates.gate == "C") == carried
    frequent.sort(key=lambda i: (-overall[i] if reverse else overall[i], gates.types[i]))
    return [{"word": gates.types[i], "mean": float(overall[i]), "layers": means[i].tolist(),
             "train_count": int(gates.train_counts[i]), "count": int(gates.counts[i])}
            for i in frequent[:top]]


def summarize(gates: TokenGates, *, min_count: int = 20, top: int = 15) -> dict[str, Any]:
    """Mean gate over all tokens and by frequency bin, length and class (count-weighted over
    types: means over tokens), and the `top` most carried and most transformed words among
    those seen at least `min_count` times in training."""
    everything = np.ones(len(gates.types), bool)
    lengths = gates.lengths
    overall = _group("all", everything, gates)
    per_token = gates.per_token().astype(np.float64)  # [tokens, layers]
    averaged = per_token.mean(axis=1)
    tokens, edges = np.histogram(averaged, bins=HISTOGRAM_BINS)
    per_unit = np.asarray(overall["per_unit"])
    return {
        "gate": gates.gate,
        "variant": gates.variant,
        "layers": gates.layers,
        "tokens": int(gates.counts.sum()),
        "types": len(gates.types),
        "overall": overall,
        "spread": {
            "std": per_token.std(axis=0).tolist(),
            "percentiles": {str(q): np.percentile(per_token, q, axis=0).tolist()
                            for q in (1, 5, 25, 50, 75, 95, 99)},
            # Units whose mean over all tokens is past one half (T: mostly transforming).
            "units_over_half": (per_unit > 0.5).sum(axis=-1).tolist(),
            "unit_max": per_unit.max(axis=-1).tolist(),
            "unit_min": per_unit.min(axis=-1).tolist(),
            "histogram": {"edges": edges.tolist(), "tokens": tokens.tolist(),
                          "of": "each token's gate, mean over units and layers"},
        },
        "by_frequency": _grouped(gates.frequency_bins, [b[0] for b in FREQUENCY_BINS], gates),
        "by_length": _grouped(lengths, sorted({n for n in lengths if n is not None}), gates),
        "by_class": _grouped(gates.classes, CLASSES, gates),
        "min_count": min_count,
        "most_carried": _ranked(gates, min_count, top, carried=True),
        "most_transformed": _ranked(gates, min_count, top, carried=False),
        **({"silent_h": _silent_h(gates)} if gates.silent is not None else {}),
    }


def _gate_weights(layer, branch: str) -> tuple[np.ndarray, np.ndarray]:
    """(bias, kernel) of one highway layer's gate `branch` ("t" or "c"): its slices of the
    fused bias and kernel; for gru_gate (T = its update gate z) -b_g and [W_z; U_z], the maps
    of H(x) and of x that z reads."""
    d = layer.kernel.shape[0]
    if layer.variant == "gru_gate":
        w, u = (np.asarray(k)[:, d:2 * d]
                for k in (layer.gate_kernel, layer.gate_recurrent_kernel))
        return -np.asarray(layer.gate_bias), np.concatenate([w, u])
    start = LEARNED_BRANCHES[layer.variant].index(branch) * d
    return np.asarray(layer.bias)[start:start + d], np.asarray(layer.kernel)[:, start:start + d]


def gate_parameters(model, gate: str) -> dict[str, list[float]]:
    """Each highway layer's gate bias (b_T or b_C; gru_gate: -b_g, its update gate's; mean,
    min, max over units) and its kernel's mean absolute weight (gru_gate: of W_z and U_z):
    how far they are from where they started."""
    branch = gate.lower()
    found = {"bias_mean": [], "bias_min": [], "bias_max": [], "kernel_mean_abs": []}
    for layer in char_embedder(model).highways:
        bias, kernel = _gate_weights(layer, branch)
        found["bias_mean"].append(float(bias.mean()))
        found["bias_min"].append(float(bias.min()))
        found["bias_max"].append(float(bias.max()))
        found["kernel_mean_abs"].append(float(np.abs(kernel).mean()))
    return found


def _parameters(model, gate: str) -> dict[str, list[float]] | None:
    """`gate_parameters`, or None for the share, which is no one gate's."""
    return None if gate == SHARE else gate_parameters(model, gate)


def _dumps(report: dict[str, Any]) -> str:
    """JSON, indented, with each list of numbers on one line (the per-unit means are long)."""
    text = json.dumps(report, indent=1)
    return _NUMBERS.sub(lambda m: " ".join(m.group(0).split()).replace("[ ", "[")
                        .replace(" ]", "]"), text) + "\n"


def _annotate(ax, x, y, tokens, vertical=False):
    for xi, yi, n in zip(x, y, tokens):
        ax.annotate(f"{n:,}", (xi, yi), textcoords="offset points", xytext=(0, 5),
                    ha="center", va="bottom", fontsize=6, color="0.3",
                    rotation=90 if vertical else 0)


def plot_tokens(report: dict[str, Any], path: str | os.PathLike | None = None,
                title: str = ""):
    """Mean gate by frequency bin, by length and by word class (one line, or bar, per highway
    layer; the tokens of each group annotated), and the distribution over tokens; the mean
    over all tokens dashed, and at initialisation dotted when the report has it. The y-axes
    start near the lowest value, not at 0: the differences are small."""
    from matplotlib.figure import Figure

    gate, layers = report["gate"], report["layers"]
    fig = Figure(figsize=(19, 4.6))
    axes = fig.subplots(1, 4, gridspec_kw={"width_ratios": [1.1, 1.5, 1.0, 1.0]})
    panels = (("by_frequency", "count in the training split"),
              ("by_length", "word length (characters)"), ("by_class", "word class"))
    references = [("all tokens", "--", float(np.mean(report["overall"]["mean"])))]
    if report.get("initial"):
        references.append(("at initialisation", ":", float(np.mean(report["initial"]["mean"]))))
    for ax, (key, xlabel) in zip(axes, panels):
        groups = report[key]
        x = np.arange(len(groups))
        width = 0.8 / len(layers)
        for i, layer in enumerate(layers):
            y = [g["mean"][i] for g in groups]
            if key == "by_class":
                ax.bar(x + (i - (len(layers) - 1) / 2) * width, y, width, label=layer)
            else:
                ax.plot(x, y, marker="o", markersize=3, label=layer)
        top = [max(g["mean"]) for g in groups]
        _annotate(ax, x, top, [g["tokens"] for g in groups], vertical=key == "by_length")
        for label, style, value in references:
            ax.axhline(value, color="0.4", linestyle=style, linewidth=0.8, label=label)
        ax.set_xticks(x, [g["group"] for g in groups], fontsize=7,
                      rotation=30 if key == "by_class" else 0)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(_over_units(gate), fontsize=8)
        ax.tick_params(labelsize=7)
        low, high = ax.get_ylim()
        if key == "by_class":  # bars from the lowest group, so the differences show
            low = min([min(g["mean"]) for g in groups] + [v for _, _, v in references])
            low -= 0.1 * (high - low)
        ax.set_ylim(low, high + 0.15 * (high - low))
        ax.set_title(f"mean {gate} {key.replace('_', ' ')} (labels: tokens)", fontsize=9)
    histogram = report["spread"]["histogram"]
    edges = np.asarray(histogram["edges"])
    axes[3].bar(edges[:-1], histogram["tokens"], np.diff(edges), align="edge", color="C0")
    for label, style, value in references:
        axes[3].axvline(value, color="0.4", linestyle=style, linewidth=0.8, label=label)
    axes[3].set_xlabel(("H's share of a token's output" if gate == SHARE
                        else f"{gate} of a token, mean over units")
                       + (", mean over layers" if len(layers) > 1 else ""), fontsize=8)
    axes[3].set_ylabel("tokens", fontsize=8)
    axes[3].tick_params(labelsize=7)
    axes[3].set_title(f"distribution over tokens (std {np.mean(report['spread']['std']):.4f})",
                      fontsize=9)
    axes[0].legend(fontsize=7, loc="lower left")
    if gate == SHARE:
        carried = "the transform path's, Σ|T·H| / Σ(|T·H| + |C·x|): 0 carries, 1 transforms"
    elif _both_gates(report["variant"]):
        carried = ("H's share: 0 none, 1 all" if gate == "T"
                   else "the input's share: 0 none, 1 all")
    else:
        carried = "0 carries, 1 transforms" if gate == "T" else "1 carries, 0 blocks the input"
    fig.suptitle((title + ": " if title else "") + f"{gate} per token ({carried}), "
                 f"{report['tokens']:,} tokens, {report['types']:,} word types", fontsize=10)
    fig.tight_layout()
    if path is not None:
        with atomic_path(path, overwrite=True) as tmp:
            fig.savefig(tmp, dpi=DPI)
    return fig


def _over_units(gate: str) -> str:
    """What a report's number is, e.g. "mean T over units"."""
    return "H's share of the output" if gate == SHARE else f"mean {gate} over units"


def _silent_h(gates: TokenGates) -> dict[str, Any]:
    """How often each highway layer's H is exactly 0 (a ReLU that does not fire): the share of
    (token, unit) pairs, of tokens with H silent on every unit, and the units silent for every
    word of the split."""
    silent = gates.silent.astype(bool)  # [types, layers, units]
    weights = gates.counts / gates.counts.sum()
    return {"tokens": np.tensordot(weights, silent, axes=1).mean(axis=-1).tolist(),
            "tokens_all_silent": np.tensordot(weights, silent.all(axis=-1), axes=1).tolist(),
            "units_never_firing": silent.all(axis=0).sum(axis=-1).tolist(),
            "units": int(silent.shape[-1])}


def markdown(report: dict[str, Any]) -> str:
    """The report's tables in Markdown: by frequency, length and class, then the word lists."""
    gate, layers = report["gate"], report["layers"]
    head = "| {} | tokens | types | " + " | ".join(f"mean {gate}, {n}" for n in layers) + " |"
    rule = "| --- | ---: | ---: | " + " | ".join("---:" for _ in layers) + " |"
    lines = [f"{_over_units(gate)[0].upper()}{_over_units(gate)[1:]} per token "
             f"({report['variant']} highway layers"
             + ("; the transform path's share, Σ|T·H| / Σ(|T·H| + |C·x|)" if gate == SHARE
                else "") + "); "
             f"{report['tokens']:,} tokens, {report['types']:,} word types. All tokens: "
             + ", ".join(f"{n} {m:.4f}" for n, m in zip(layers, report["overall"]["mean"]))
             + "."]
    if report.get("initial"):
        lines[0] += (" At initialisation: " + ", ".join(
            f"{n} {m:.4f}" for n, m in zip(layers, report["initial"]["mean"])) + ".")
    if report.get("silent_h"):
        silent = report["silent_h"]
        lines[0] += (" H is 0 (its ReLU silent) for " + ", ".join(
            f"{n} {f:.1%}" for n, f in zip(layers, silent["tokens"])) + " of (token, unit) "
            "pairs" + (f" ({', '.join(f'{f:.1%}' for f in report['initial']['silent_h']['tokens'])}"
                       " at initialisation)" if report.get("initial") else "")
            + "; tokens with H silent on every unit: " + ", ".join(
                f"{n} {f:.1%}" for n, f in zip(layers, silent["tokens_all_silent"]))
            + "; units silent for every word: " + ", ".join(
                f"{n} {k} of {silent['units']}"
                for n, k in zip(layers, silent["units_never_firing"])) + ".")
    for key, what in (("by_frequency", "training count"), ("by_length", "characters"),
                      ("by_class", "class")):
        lines += ["", head.format(what), rule]
        lines += [f"| {g['group']} | {g['tokens']:,} | {g['types']:,} | "
                  + " | ".join(f"{m:.4f}" for m in g["mean"]) + " |" for g in report[key]]
    for key, what in zip(("most_carried", "most_transformed"),
                         _word_lists(gate, report["variant"]), strict=True):
        lines += ["", f"{what} (training count >= {report['min_count']}; "
                  f"{_over_units(gate)}{', mean over' if gate == SHARE else ' and'} layers):",
                  "",
                  f"| word | mean {gate} | training count | tokens here |",
                  "| --- | ---: | ---: | ---: |"]
        lines += [f"| {w['word']} | {w['mean']:.4f} | {w['train_count']:,} | {w['count']:,} |"
                  for w in report[key]]
    return "\n".join(lines) + "\n"


def token_report(model, corpus: Corpus, out: str | os.PathLike, split: str = "test", *,
                 gate: str | None = None, batch_size: int = 1024, min_count: int = 20,
                 top: int = 15, initial=None,
                 describe: dict[str, Any] | None = None) -> dict[str, Any]:
    """`summarize(token_gates(...))` with `gate_parameters`, into `out`: tokens.json (every
    number, per-unit means by group included), tokens.png and tokens.md.

    `initial`: the same architecture freshly initialised (optional); its mean gate over all
    tokens is reported beside the trained one, to show how far training moved it.
    """
    gates = token_gates(model, corpus, split, gate=gate, batch_size=batch_size)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"model": getattr(model, "name", None), **(describe or {}), "split": split,
              **summarize(gates, min_count=min_count, top=top),
              "parameters": _parameters(model, gates.gate)}
    if initial is not None:
        fresh = token_gates(initial, corpus, split, gate=gates.gate, batch_size=batch_size)
        initial_summary = summarize(fresh, min_count=min_count, top=0)
        report["initial"] = {"mean": initial_summary["overall"]["mean"],
                             "std": initial_summary["spread"]["std"],
                             "parameters": _parameters(initial, gates.gate)}
        if "silent_h" in initial_summary:
            report["initial"]["silent_h"] = initial_summary["silent_h"]
    report["files"] = {"json": TOKENS_FILE, "figure": TOKENS_FIGURE, "table": TOKENS_TABLE}
    report = jsonable(report, digits=5)
    plot_tokens(report, out / TOKENS_FIGURE, title=str(report.get("model") or ""))
    write_text(out / TOKENS_TABLE, markdown(report), overwrite=True)
    write_text(out / TOKENS_FILE, _dumps(report), overwrite=True)
    return report

