"""Per-token gate activity of a character-aware language model (zoo/analysis/tokens.py): the
gates against NumPy, the group means against token-level means, known biases, the CLI."""

import json
import math
import re
from collections import Counter

import numpy as np
import pytest

import zoo
from highway_zoo import cli
from training.data.text import load_corpus
from zoo.analysis.tokens import gate_parameters, summarize, token_gates

SMALL = "lstm_char_small_ptb"
WIDTH = 12  # characters per token; Small's widest convolution is 6
TRAIN = [
    "the cat sat on the mat",
    "the dog ran to the cat",
    "N dogs ran in 1987",
    "<unk> is on the mat",
    "a cat and a dog",
    "the cats were here",
]
TEST = [
    "the zebra sat on the mat",
    "N cats ran in 2,000 years",
    "<unk> and the dog",
]
# What each test word is, written out by hand (not by the code's rules).
CLASS_OF = {
    "the": "function word", "on": "function word", "in": "function word",
    "and": "function word", "zebra": "content word", "sat": "content word",
    "mat": "content word", "cats": "content word", "ran": "content word",
    "years": "content word", "dog": "content word", "N": "number", "2,000": "number",
    "<unk>": "<unk>", "<eos>": "<eos>",
}


def _write(directory, lines_by_split):
    directory.mkdir(parents=True, exist_ok=True)
    for split, lines in lines_by_split.items():
        (directory / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def _tokens(lines):
    return [t for line in lines for t in (*line.split(), "<eos>")]


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("corpus"),
                  {"train": TRAIN, "valid": TRAIN[:2], "test": TEST})


@pytest.fixture(scope="module")
def corpus(corpus_dir):
    return load_corpus(corpus_dir, max_word_length=WIDTH)


def _model(corpus, variant="coupled", layers=2, seed=0):
    model = zoo.load(SMALL, variant=variant, highway_layers=layers, lstm_units=4,
                     classes=corpus.num_words, char_vocab_size=corpus.num_chars,
                     input_shape=[None, WIDTH])
    # Weights far from the initial ±0.05, so every word gets gates of its own.
    rng = np.random.default_rng(seed)
    embedder = model.get_layer("embedder")
    for weight in embedder.weights:  # kernels scaled by fan-in: the gates do not saturate
        scale = 1.0 if len(weight.shape) == 1 else 1.5 / math.sqrt(np.prod(weight.shape[:-1]))
        weight.assign(rng.normal(0, scale, weight.shape).astype("float32"))
    return model


def _numpy_gates(model, chars, gate=None):
    """[tokens, layers, units] of T (C for c_only, or where `gate` is "C"; the transform
    path's share Σ|T·H| / Σ(|T·H| + |C·x|) of the word's output where it is "share"; whether H
    is 0 where it is "silent") from the weights alone:
    embedding, each width's convolution over the windows inside the word, max, tanh, then the
    highway layers (Kim's layout; layers.CharCNNEmbedder's docstring)."""
    embedder = model.get_layer("embedder")
    table = np.asarray(embedder.embedding.embeddings, np.float64)
    chars = np.asarray(chars)
    embedded = table[chars] * (chars != 0)[..., None]
    lengths = (chars != 0).sum(axis=1)
    pooled = []
    for conv, k in zip(embedder.convolutions, embedder.kernel_sizes):
        kernel, bias = (np.asarray(w, np.float64) for w in conv.weights)
        windows = chars.shape[1] - k + 1
        z = np.stack([np.einsum("tjc,jcf->tf", embedded[:, p:p + k], kernel) + bias
                      for p in range(windows)], axis=1)
        inside = np.arange(windows)[None, :] <= np.maximum(lengths - k, 0)[:, None]
        pooled.append(np.tanh(np.where(inside[..., None], z, -np.inf).max(axis=1)))
    x = np.concatenate(pooled, axis=-1)
    sigmoid = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    gates = []
    for layer in embedder.highways:
        kernel, bias = np.asarray(layer.kernel, np.float64), np.asarray(layer.bias, np.float64)
        branches = {"coupled": "ht", "full": "htc", "c_only": "hc", "t_only": "ht",
                    "residual": "h"}[layer.variant]
        d = x.shape[-1]
        z = {b: x @ kernel[:, i * d:(i + 1) * d] + bias[i * d:(i + 1) * d]
             for i, b in enumerate(branches)}
        h = np.maximum(z["h"], 0)
        t = sigmoid(z["t"]) if "t" in z else np.ones_like(x)
        c = sigmoid(z["c"]) if "c" in z else np.ones_like(x)
        if layer.variant == "coupled":
            c = 1 - t
        if gate == "share":  # of the word's output, summed over units
            transformed = np.abs(t * h).sum(axis=-1, keepdims=True)
            gates.append(transformed / (transformed + np.abs(c * x).sum(axis=-1, keepdims=True)))
        elif gate == "silent":
            gates.append(h == 0)
        else:
            gates.append(t if "t" in z and gate != "C" else c)
        x = h * t + x * c
    return np.stack(gates, axis=1)


@pytest.mark.parametrize("variant, asked, gate", [
    ("coupled", None, "T"), ("full", None, "T"), ("full", "C", "C"), ("c_only", None, "C")])
def test_every_tokens_gates_match_numpy(corpus, variant, asked, gate):
    model = _model(corpus, variant)
    gates = token_gates(model, corpus, "test", gate=asked, batch_size=4)  # several batches
    assert gates.gate == gate and gates.layers == ["highway_1", "highway_2"]
    expected = _numpy_gates(model, corpus.test.chars, gate)  # every token, not once per type
    per_token = gates.values[gates.token_type]
    np.testing.assert_allclose(per_token, expected, atol=2e-5)
    np.testing.assert_allclose(gates.per_token(), expected.mean(axis=-1), atol=2e-5)
    # The gates really differ between words and between layers (the check above can fail).
    assert np.ptp(gates.values, axis=0).mean() > 0.1 and np.ptp(gates.type_means) > 1e-3
    assert np.abs(gates.values[:, 0] - gates.values[:, 1]).mean() > 0.1
    # The types are the test file's words, counted, and the training counts the train file's.
    assert dict(zip(gates.types, gates.counts.tolist())) == Counter(_tokens(TEST))
    in_train = Counter(_tokens(TRAIN))
    assert gates.train_counts.tolist() == [in_train[w] for w in gates.types]
    # The embedder alone gives the same.
    alone = token_gates(model.get_layer("embedder"), corpus, "test", gate=asked)
    np.testing.assert_allclose(alone.values, gates.values, atol=1e-6)


@pytest.mark.parametrize("variant", ["coupled", "full", "t_only", "c_only", "residual"])
def test_the_transform_paths_share_matches_numpy(corpus, variant):
    # What the gates do: residual has none, yet its H and x differ in size per word.
    model = _model(corpus, variant, seed=3)
    gates = token_gates(model, corpus, "test", gate="share", batch_size=4)
    assert gates.gate == "share" and gates.variant == variant
    expected = _numpy_gates(model, corpus.test.chars, "share")
    # float32 against float64: a ratio of two small magnitudes magnifies the rounding
    np.testing.assert_allclose(gates.values[gates.token_type], expected, atol=1e-4)
    assert np.ptp(gates.type_means) > 1e-2  # words differ: the check above can fail
    if variant == "coupled":  # not the gate: H and x weigh in
        t = token_gates(model, corpus, "test").values
        assert np.abs(gates.values - t).mean() > 0.05


def test_plains_share_is_one_and_gru_gates_is_refused(corpus):
    model = _model(corpus, "plain", layers=1)
    highway = model.get_layer("embedder").highways[0]
    d = highway.kernel.shape[0]
    bias = np.asarray(highway.bias)
    bias[:d // 2] = -50.0  # half of H never fires; each word's output is still nonzero
    highway.bias.assign(bias)
    gates = token_gates(model, corpus, gate="share")
    np.testing.assert_array_equal(gates.values, 1.0)  # y = H: no carry path
    bias[:d] = -50.0  # H is silent for every word: the output is 0, still all H's
    highway.bias.assign(bias)
    np.testing.assert_array_equal(token_gates(model, corpus, gate="share").values, 1.0)
    residual = _model(corpus, "residual", layers=1)
    highway = residual.get_layer("embedder").highways[0]
    highway.bias.assign(np.full(highway.bias.shape, -50.0, "float32"))
    silent = token_gates(residual, corpus, gate="share").values  # y = x: the carry path's
    np.testing.assert_array_equal(silent, 0.0)
    with pytest.raises(ValueError, match=re.escape("its output is not H·T + x·C")):
        token_gates(_model(corpus, "gru_gate", layers=1), corpus, gate="share")


def test_group_means_are_token_means(corpus):
    model = _model(corpus, seed=1)
    gates = token_gates(model, corpus, "test")
    report = summarize(gates, min_count=3, top=4)
    tokens = _tokens(TEST)
    per_token = gates.per_token()  # [tokens, layers]
    in_train = Counter(_tokens(TRAIN))

    def means(label_of):
        labels = [label_of(t) for t in tokens]
        return {label: (labels.count(label), per_token[[i for i, x in enumerate(labels)
                                                        if x == label]].mean(axis=0))
                for label in set(labels)}

    def frequency(word):
        n = in_train[word]
        return "unseen" if n == 0 else "1" if n == 1 else "2-3" if n <= 3 else "4-9"

    expected = {
        "by_class": means(CLASS_OF.__getitem__),
        "by_frequency": means(frequency),
        "by_length": means(lambda w: None if w in ("<eos>", "<unk>") else len(w)),
    }
    expected["by_length"].pop(None)
    for key, groups in expected.items():
        found = {g["group"]: (g["tokens"], g["mean"]) for g in report[key]}
        assert set(found) == {str(label) for label in groups}, key
        for label, (count, mean) in groups.items():
            assert found[str(label)][0] == count, (key, label)
            np.testing.assert_allclose(found[str(label)][1], mean, atol=1e-6)
    assert [g["group"] for g in report["by_frequency"]] == ["unseen", "1", "2-3", "4-9"]
    assert report["tokens"] == len(tokens)
    np.testing.assert_allclose(report["overall"]["mean"], per_token.mean(axis=0), atol=1e-6)
    # Per-unit means of a group: the mean over its tokens of each unit's gate.
    zebra = [i for i, t in enumerate(tokens) if frequency(t) == "unseen"]
    unseen = next(g for g in report["by_frequency"] if g["group"] == "unseen")
    np.testing.assert_allclose(unseen["per_unit"],
                               gates.values[gates.token_type[zebra]].mean(axis=0), atol=1e-6)
    # Most carried: lowest T first among words seen >= 3 times in training; transformed: highest.
    frequent = sorted({w for w in tokens if in_train[w] >= 3},
                      key=lambda w: per_token[tokens.index(w)].mean())
    assert [w["word"] for w in report["most_carried"]] == frequent[:4]
    assert [w["word"] for w in report["most_transformed"]] == frequent[::-1][:4]


def test_a_known_gate_bias_gives_sigmoid_of_it(corpus):
    for variant, branch, gate in (("coupled", 1, "T"), ("full", 1, "T"), ("c_only", 1, "C")):
        model = _model(corpus, variant)
        biases = (1.3, -0.7)
        for layer, b in zip(model.get_layer("embedder").highways, biases):
            d = layer.kernel.shape[0]
            kernel, bias = np.asarray(layer.kernel).copy(), np.asarray(layer.bias).copy()
            kernel[:, branch * d:(branch + 1) * d] = 0
            bias[branch * d:(branch + 1) * d] = b
            layer.kernel.assign(kernel)
            layer.bias.assign(bias)
        report = summarize(token_gates(model, corpus, "test"))
        assert report["gate"] == gate
        parameters = gate_parameters(model, gate)
        np.testing.assert_allclose(parameters["bias_min"], biases, atol=1e-6)
        np.testing.assert_allclose(parameters["bias_max"], biases, atol=1e-6)
        assert parameters["kernel_mean_abs"] == [0.0, 0.0]
        expected = [1 / (1 + math.exp(-b)) for b in biases]
        for group in (report["overall"], *report["by_class"], *report["by_length"]):
            np.testing.assert_allclose(group["mean"], expected, atol=1e-6)
            np.testing.assert_allclose(np.asarray(group["per_unit"]).min(axis=1), expected,
                                       atol=1e-6)


@pytest.mark.parametrize("variant", ["residual", "plain"])
def test_a_variant_without_gates_is_refused(corpus, variant):
    with pytest.raises(ValueError, match=f"variant '{variant}', which has no gate"):
        token_gates(_model(corpus, variant, layers=1), corpus)


def test_cli_writes_the_figure_the_table_and_the_numbers(corpus, corpus_dir, tmp_path, capsys):
    model = _model(corpus, layers=1)
    run = zoo.save(model, tmp_path / "run", extra={
        "vocabulary": {"words": list(corpus.words), "chars": list(corpus.chars)}})
    out = tmp_path / "tokens"
    code = cli.main(["analyze", SMALL, "--weights", str(run), "--corpus", str(corpus_dir),
                     "--out", str(out), "--batch-size", "5"])
    assert code in (0, None)
    assert sorted(p.name for p in out.iterdir()) == ["tokens.json", "tokens.md", "tokens.png"]
    report = json.loads((out / "tokens.json").read_text())
    expected = _numpy_gates(model, corpus.test.chars).mean(axis=(1, 2)).mean()
    assert report["split"] == "test" and report["tokens"] == len(_tokens(TEST))
    assert report["overall"]["mean"][0] == pytest.approx(expected, abs=1e-5)
    # The reference: the same architecture freshly initialised (b_T = -2, small kernels).
    assert report["initial"]["parameters"]["bias_mean"] == [pytest.approx(-2.0)]
    assert report["initial"]["parameters"]["kernel_mean_abs"][0] < 0.03  # uniform ±0.05
    assert report["parameters"]["kernel_mean_abs"][0] > 0.03  # _model's weights
    assert abs(report["initial"]["mean"][0] - 1 / (1 + math.exp(2))) < 0.01
    table = (out / "tokens.md").read_text()
    assert f"All tokens: highway_1 {report['overall']['mean'][0]:.4f}." in table
    assert "| 4-9 | 6 | 2 |" in table  # the, <eos>: 6 times each in training, 3 here
    assert "| function word | 6 | 4 |" in table  # the (3), on, in, and: 6 tokens, 4 types
    assert (out / "tokens.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"mean T {report['overall']['mean'][0]:.4f}" in capsys.readouterr().out


def test_full_ranks_its_words_by_the_gate_asked_for(corpus, corpus_dir, tmp_path):
    # Full learns T and C each on its own: its C is asked for, and its words are not called
    # carried or transformed by one gate.
    model = _model(corpus, "full", layers=1, seed=2)
    run = zoo.save(model, tmp_path / "run", extra={
        "vocabulary": {"words": list(corpus.words), "chars": list(corpus.chars)}})
    for gate in ("T", "C"):
        out = tmp_path / gate
        assert cli.main(["analyze", SMALL, "--weights", str(run), "--corpus", str(corpus_dir),
                         "--out", str(out), "--gate", gate]) in (0, None)
        report = json.loads((out / "tokens.json").read_text())
        expected = _numpy_gates(model, corpus.test.chars, gate).mean(axis=(1, 2)).mean()
        assert report["gate"] == gate
        assert report["overall"]["mean"][0] == pytest.approx(expected, abs=1e-5)
        ranked = summarize(token_gates(model, corpus, "test", gate=gate), min_count=1)
        first = [w["mean"] for w in ranked["most_carried"]]
        # T: lowest first, where least of H passes; C: highest first, most of x passes.
        assert first == sorted(first, reverse=gate == "C") and len(first) > 1
        table = (out / "tokens.md").read_text()
        assert "carried" not in table and "transformed" not in table
        words = "the input" if gate == "C" else "H"
        assert f"Words of lowest {gate}, where least of {words} passes" in table
        assert f"Words of highest {gate}, where most of {words} passes" in table


def test_cli_measures_residuals_share(corpus, corpus_dir, tmp_path):
    model = _model(corpus, "residual", layers=1, seed=4)
    run = zoo.save(model, tmp_path / "run", extra={
        "vocabulary": {"words": list(corpus.words), "chars": list(corpus.chars)}})
    out = tmp_path / "share"
    assert cli.main(["analyze", SMALL, "--weights", str(run), "--corpus", str(corpus_dir),
                     "--out", str(out), "--gate", "share"]) in (0, None)
    report = json.loads((out / "tokens.json").read_text())
    expected = _numpy_gates(model, corpus.test.chars, "share").mean(axis=(1, 2)).mean()
    assert report["gate"] == "share" and report["parameters"] is None
    assert report["overall"]["mean"][0] == pytest.approx(expected, abs=1e-5)
    silent = _numpy_gates(model, corpus.test.chars, "silent")  # [tokens, 1, units]
    assert 0 < silent.mean() < 1  # some of H's ReLUs fire, some do not
    assert report["silent_h"]["tokens"][0] == pytest.approx(silent.mean(), abs=1e-5)
    assert report["silent_h"]["units_never_firing"] == [int(silent.all(axis=0).sum())]
    assert report["silent_h"]["tokens_all_silent"][0] == pytest.approx(
        silent.all(axis=-1).mean(), abs=1e-6)
    ranked = summarize(token_gates(model, corpus, "test", gate="share"), min_count=1)
    first = [w["mean"] for w in ranked["most_carried"]]  # least of H first
    assert first == sorted(first) and len(first) > 1
    table = (out / "tokens.md").read_text()
    assert "Most carried words" in table and "Most transformed words" in table
    assert f"H is 0 (its ReLU silent) for highway_1 {silent.mean():.1%}" in table


def _one_line_error(capsys, argv, expected):
    try:
        code = cli.main(argv)
    except SystemExit as stop:
        code = stop.code
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (argv, code, lines)
    assert lines[0].startswith("highway-zoo analyze") and expected in lines[0], lines[0]


def test_bad_input_is_one_line_and_exit_2(corpus, corpus_dir, tmp_path, capsys):
    run = zoo.save(_model(corpus, layers=1), tmp_path / "run", extra={
        "vocabulary": {"words": list(corpus.words), "chars": list(corpus.chars)}})
    residual = zoo.save(_model(corpus, "residual", layers=1), tmp_path / "residual")
    other = _write(tmp_path / "other", {"train": ["xyz qq"], "valid": ["xyz"], "test": ["qq"]})
    base = ["analyze", SMALL, "--weights", str(run), "--out", str(tmp_path / "out")]
    _one_line_error(capsys, [*base, "--corpus", str(tmp_path / "nowhere")], "does not exist")
    _one_line_error(capsys, [*base, "--corpus", str(other)], "another character vocabulary")
    _one_line_error(capsys, base, "pass --corpus DIR")
    _one_line_error(capsys, ["analyze", "highway_fc10_mnist", "--weights", str(run),
                             "--corpus", str(corpus_dir)], "highway_fc10_mnist is not one")
    _one_line_error(capsys, ["analyze", SMALL, "--weights", str(residual), "--corpus",
                             str(corpus_dir), "--out", str(tmp_path / "out")], "has no gate")
    _one_line_error(capsys, [*base, "--corpus", str(corpus_dir), "--gate", "C"],
                    "gate must be one the variant 'coupled' learns")
    _one_line_error(capsys, [*base, "--gate", "T"], "Drop --gate, or add --corpus")
    gru = zoo.save(_model(corpus, "gru_gate", layers=1), tmp_path / "gru_gate")
    _one_line_error(capsys, ["analyze", SMALL, "--weights", str(gru), "--corpus",
                             str(corpus_dir), "--out", str(tmp_path / "out"), "--gate",
                             "share"], "its output is not H·T + x·C")
    assert not (tmp_path / "out").exists()


def test_frequency_bins_and_word_classes_at_their_edges():
    from zoo.analysis.tokens import frequency_bin, word_class

    bins = {0: "unseen", 1: "1", 2: "2-3", 3: "2-3", 4: "4-9", 9: "4-9", 10: "10-99",
            99: "10-99", 100: "100-999", 999: "100-999", 1000: "1000+", 10**6: "1000+"}
    assert {n: frequency_bin(n) for n in bins} == bins
    classes = {"N": "number", "1987": "number", "3.5": "number",
               "n't": "content word", "'s": "content word", "The": "function word",
               "whereas": "function word", "stocks": "content word", "<unk>": "<unk>",
               "<eos>": "<eos>", "N.": "content word", "-": "content word"}
    assert {w: word_class(w) for w in classes} == classes
