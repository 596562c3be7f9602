"""The gate analyses on the gated skips (issue 31).

gru_gate: the layers' transform gate is GTrXL's update gate z, checked against this file's own
NumPy implementation of the gate (Parisotto et al. 2019, with y = H(x)) in HighwayDense,
HighwayConv2D and HighwayStack (on TensorFlow, and on JAX and PyTorch in subprocesses); so NIPS
2015 Figs. 2-4, routing, the per-token gates, the TensorBoard summaries and the export's
"gates" signature give z of a gru_gate net, checked against NumPy on the net's weights.

The static skips (rezero, layerscale, laurel_rw, laurel_lr): `highway-zoo analyze` writes
their learned scales, checked against the scales recovered by least squares from what each
layer's forward pass does (not from the weights the report reads), and routing and per-token
gates are refused in one line with exit status 2.
"""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from test_backends import OTHER_BACKENDS, assert_close, run_on_backend
from test_gated_skips import _conv_same, _sigmoid

import zoo
from highway_zoo import cli
from layers import CharCNNEmbedder, HighwayConv2D, HighwayDense, HighwayStack
from layers.variants import STATIC_SKIPS, no_routing

D, C, K, DEPTH, BATCH = 5, 3, 3, 3, 4
FC = "highway_fc10_mnist"
LM = "lstm_char_small_ptb"
ACTIVATIONS = {"tanh": np.tanh, "relu": lambda v: np.maximum(v, 0.0)}


# == NumPy =======================================================================================

def numpy_gru(x, w, linear=np.matmul, activation="tanh"):
    """(z, output) of one gru_gate layer from its weights `w` (by name): y = H(x), then
    r = s(W_r y + U_r x), z = s(W_z y + U_z x - b_g), g = tanh(W_g y + U_g (r x)),
    output = (1 - z) x + z g (Parisotto et al. 2019, eqs. of the GRU-type gate)."""
    y = ACTIVATIONS[activation](linear(x, w["kernel"]) + w["bias"])
    d = x.shape[-1]
    w_r, w_z, w_g = (w["gate_kernel"][..., i * d:(i + 1) * d] for i in range(3))
    u_r, u_z, u_g = (w["gate_recurrent_kernel"][..., i * d:(i + 1) * d] for i in range(3))
    r = _sigmoid(linear(y, w_r) + linear(x, u_r))
    z = _sigmoid(linear(y, w_z) + linear(x, u_z) - w["gate_bias"])
    g = np.tanh(linear(y, w_g) + linear(r * x, u_g))
    return z, (1.0 - z) * x + z * g


def numpy_weights(layer):
    return {w.name: keras.ops.convert_to_numpy(w).astype(np.float64) for w in layer.weights}


# == the layers' z ===============================================================================

def gru_layer(kind, seed=0):
    """A built gru_gate layer of `kind` (tanh H), random weights (from NumPy: the same on every
    backend), and its input."""
    rng = np.random.default_rng(seed)
    common = dict(activation="tanh", variant="gru_gate")
    if kind == "dense":
        layer, x = HighwayDense(**common), rng.normal(size=(BATCH, D))
    elif kind == "conv":
        layer, x = HighwayConv2D(K, **common), rng.normal(size=(2, 4, 4, C))
    else:
        layer, x = HighwayStack(DEPTH, **common), rng.normal(size=(BATCH, D))
    x = x.astype(np.float32)
    layer.build(x.shape)
    for w in layer.weights:
        w.assign((rng.normal(size=w.shape) * 0.7).astype(np.float32))
    return layer, x


def gates_on_this_backend(out):
    """Each kind's z as the layer gives it (`<kind>/...`) and as NumPy does (`<kind>/numpy_...`),
    into `out`."""
    for kind in ("dense", "conv", "stack"):
        layer, x = gru_layer(kind)
        w = numpy_weights(layer)
        x64 = x.astype(np.float64)
        if kind == "stack":
            zs, outputs = [], []
            for i in range(DEPTH):
                z, x64 = numpy_gru(x64, {k: v[i] for k, v in w.items()})
                zs.append(z)
                outputs.append(x64)
            z, y = np.stack(zs), np.stack(outputs)
            out["stack/t"] = layer.transform_gates(x)
            out["stack/c"] = layer.carry_gates(x)
            out["stack/means"] = layer.mean_transform_gates(x)
            out["stack/outputs"] = layer.layer_outputs(x)
            out["stack/numpy_means"] = z.mean(axis=-1).T
            out["stack/numpy_outputs"] = y
        else:
            z, y = numpy_gru(x64, w, _conv_same if kind == "conv" else np.matmul)
            out[f"{kind}/t"] = layer.transform_gate(x)
            out[f"{kind}/c"] = layer.carry_gate(x)
            out[f"{kind}/y"] = layer(x)
            out[f"{kind}/numpy_y"] = y
        out[f"{kind}/numpy_t"] = z
        out[f"{kind}/numpy_c"] = 1.0 - z
        out[f"{kind}/bias"] = layer.transform_bias
        out[f"{kind}/numpy_bias"] = -w["gate_bias"]
    for key, value in out.items():
        out[key] = keras.ops.convert_to_numpy(value)


def _check_gates(out, backend):
    for key in [k for k in out if "/numpy_" in k]:
        assert_close(out[key.replace("numpy_", "")], out[key], f"{backend} {key}", rtol=1e-4)
    # z differs between units, examples and layers: a wrong slice or sign could not pass.
    for kind in ("dense", "conv", "stack"):
        assert np.ptp(out[f"{kind}/numpy_t"]) > 0.3, kind
        assert not np.allclose(out[f"{kind}/numpy_t"], 1.0 - out[f"{kind}/numpy_t"], atol=0.05)


def test_the_transform_gate_of_gru_gate_is_its_update_gate_z():
    """HighwayDense, HighwayConv2D and HighwayStack: `transform_gate(s)` is z, `carry_gate(s)`
    1 - z, `mean_transform_gates` z's means, `transform_bias` -b_g; the outputs are NumPy's."""
    out = {}
    gates_on_this_backend(out)
    _check_gates(out, "tensorflow")


@pytest.mark.backends
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_the_update_gate_z_on_jax_and_torch(backend, tmp_path):
    out = run_on_backend(backend, """
        import test_skip_analysis
        test_skip_analysis.gates_on_this_backend(OUT)
    """, tmp_path)
    _check_gates(out, backend)


# == a gru_gate net ==============================================================================

def images(n, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, 28, 28, 1)).astype(np.float32)


def gru_nets(depth=4, width=6, seed=0):
    """A per-layer and a stacked gru_gate FC net with the same weights: random, b_g rising by
    layer (so the mean z falls by layer, and a mix-up of layers shows)."""
    keras.utils.set_random_seed(seed)
    per_layer = zoo.load(FC, depth=depth, width=width, variant="gru_gate")
    stacked = zoo.load(FC, depth=depth, width=width, variant="gru_gate", stacked=True)
    rng = np.random.default_rng(seed)
    names = [f"highway_{i}" for i in range(1, depth)]
    for i, name in enumerate(names):
        layer = per_layer.get_layer(name)
        for w in layer.weights:
            scale = 1.0 / np.sqrt(width)
            w.assign((rng.normal(size=w.shape) * scale).astype(np.float32))
        layer.gate_bias.assign(np.full(width, 0.8 * i - 0.5, np.float32))
    stacked.get_layer("highway_stack").set_weights(
        [np.stack(ws) for ws in zip(*(per_layer.get_layer(n).get_weights() for n in names))])
    for name in ("stem_dense", "logits"):
        stacked.get_layer(name).set_weights(per_layer.get_layer(name).get_weights())
    return per_layer, stacked, names


def numpy_chain(model, names, x, skip=None):
    """Each highway layer's input and z, in NumPy from the stem's output, and the classes the
    net predicts (with layer `skip` lesioned: it passes its input on)."""
    stem = keras.Model(model.inputs[0], model.get_layer("stem_dense").output)
    h = keras.ops.convert_to_numpy(stem(x)).astype(np.float64)
    inputs, zs = [], []
    for i, name in enumerate(names):
        inputs.append(h)
        z, out = numpy_gru(h, numpy_weights(model.get_layer(name)))
        zs.append(z)
        h = h if i == skip else out
    kernel, bias = (np.asarray(w, np.float64) for w in model.get_layer("logits").get_weights())
    return inputs, zs, np.argmax(h @ kernel + bias, axis=-1)


def test_analyze_a_gru_gate_net_reads_z_as_t(tmp_path):
    """Figs. 2-4 of a gru_gate net: the mean T, one example's T and the biases are z's, -b_g,
    the lesion errors those of the net without that layer."""
    from zoo.analysis import analyze

    per_layer, _, names = gru_nets()
    x = images(60)
    _, zs, predicted = numpy_chain(per_layer, names, x)
    labels = np.argmax(keras.ops.convert_to_numpy(per_layer(x)), axis=-1)  # error 0
    np.testing.assert_array_equal(predicted, labels)
    report = analyze(per_layer, x, labels, tmp_path / "per_layer", classes=[0, 3])
    assert set(report["files"]) == {"fig2", "fig3", "fig4", "estimation", "json"}
    for name in report["files"].values():
        assert (tmp_path / "per_layer" / name).stat().st_size > 1000
    assert report["layers"] == names and report["transform_gate"].startswith("z, the update")
    mean_t = np.stack([z.mean(axis=0) for z in zs])
    np.testing.assert_allclose(report["fig2"]["mean_t"], mean_t, atol=2e-6)
    np.testing.assert_allclose(report["fig2"]["example_t"], np.stack([z[0] for z in zs]),
                               atol=2e-6)
    np.testing.assert_allclose(report["fig2"]["transform_bias"],
                               [-keras.ops.convert_to_numpy(per_layer.get_layer(n).gate_bias)
                                for n in names], atol=1e-6)
    assert np.all(np.diff(report["fig2"]["layer_mean_t"]) < 0)  # b_g rises by layer
    # Fig. 4: z := 0 makes a layer pass its input on, as NumPy's chain without it does.
    expected = [float(np.mean(numpy_chain(per_layer, names, x, skip=i)[2] != labels))
                for i in range(len(names))]
    assert report["fig4"]["baseline_error"] == 0.0
    np.testing.assert_allclose(report["fig4"]["errors"], expected)
    assert max(expected) > 0  # a lesion changes some classes: the check above can fail


def test_analyze_a_stacked_gru_gate_net_as_the_per_layer_one(tmp_path):
    from test_analysis import assert_same_report

    from zoo.analysis import analyze

    per_layer, stacked, _ = gru_nets()
    x = images(40, seed=5)
    labels = np.argmax(keras.ops.convert_to_numpy(per_layer(x)), axis=-1)
    expected = analyze(per_layer, x, labels, tmp_path / "per_layer", classes=[1])
    assert_same_report(analyze(stacked, x, labels, tmp_path / "stacked", classes=[1]),
                       expected)


def test_routing_patterns_of_a_gru_gate_net_are_z():
    from zoo.analysis.routing import routing_patterns

    per_layer, stacked, names = gru_nets()
    x = images(20, seed=1)
    _, zs, _ = numpy_chain(per_layer, names, x)
    for model in (per_layer, stacked):
        patterns, layers, units = routing_patterns(model, x, batch_size=8)
        assert layers == names and units == [6] * len(names)
        np.testing.assert_allclose(patterns, np.stack(zs, axis=1), atol=2e-6)


def test_the_gates_signature_of_a_gru_gate_net_gives_z():
    """The export's "gates" outputs are z's means per example, for the per-layer and the
    stacked net (a stack's from `mean_transform_gates`' own loop)."""
    from zoo.serving.signatures import signature_fns

    per_layer, stacked, names = gru_nets()
    x = images(16, seed=2)
    _, zs, _ = numpy_chain(per_layer, names, x)
    for label, model in (("per_layer", per_layer), ("stacked", stacked)):
        gates = tf.function(signature_fns(model)["gates"])(tf.constant(x))
        assert sorted(gates) == names
        for name, z in zip(names, zs):
            np.testing.assert_allclose(gates[name].numpy(), z.mean(axis=1), atol=2e-6,
                                       err_msg=f"{label} {name}")


def test_gate_summaries_of_a_gru_gate_net_are_z(tmp_path):
    """GateSummaries' gates.json holds z's mean per layer and -b_g's, for the per-layer and
    the stacked net."""
    from training.callbacks import GateSummaries

    per_layer, stacked, names = gru_nets()
    x = images(16, seed=2)
    _, zs, _ = numpy_chain(per_layer, names, x)
    for label, model in (("per_layer", per_layer), ("stacked", stacked)):
        run_dir = tmp_path / label
        callback = GateSummaries(run_dir / "tensorboard", x, examples=16)
        callback.set_model(model)
        callback.on_epoch_end(0)
        history = json.loads((run_dir / "gates.json").read_text())
        assert history["layers"] == names
        np.testing.assert_allclose(history["epochs"][0]["mean_t"], [z.mean() for z in zs],
                                   atol=2e-6)
        biases = [-np.mean(keras.ops.convert_to_numpy(per_layer.get_layer(n).gate_bias))
                  for n in names]
        np.testing.assert_allclose(history["epochs"][0]["transform_bias_mean"], biases,
                                   atol=1e-6)
        callback.on_train_end()


def test_an_exported_stacked_gru_gate_net_serves_z(tmp_path):
    """The SavedModel's "gates" signature (a stack's means from its own loop, with the gate's
    weights) gives z's mean per example and layer."""
    per_layer, stacked, names = gru_nets()
    x = images(5, seed=3)
    _, zs, _ = numpy_chain(per_layer, names, x)
    directory = zoo.export(stacked, base_dir=tmp_path, name="gru", warmup=False)
    served = tf.saved_model.load(str(directory)).signatures["gates"](pixels=tf.constant(x))
    assert sorted(served) == names
    for name, z in zip(names, zs):
        np.testing.assert_allclose(served[name].numpy(), z.mean(axis=1), atol=2e-6)


# == per-token gates of a gru_gate language model ================================================

def _corpus_dir(directory):
    directory.mkdir(parents=True, exist_ok=True)
    lines = {"train": ["the cat sat on the mat", "a dog ran to the cat"],
             "valid": ["the cat"], "test": ["the zebra sat", "a cat ran"]}
    for split, text in lines.items():
        (directory / f"{split}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    return directory


def small_lm(corpus, variant, seed=0):
    model = zoo.load(LM, variant=variant, highway_layers=2, lstm_units=4,
                     classes=corpus.num_words, char_vocab_size=corpus.num_chars,
                     input_shape=[None, 12])
    rng = np.random.default_rng(seed)
    for weight in model.get_layer("embedder").weights:
        scale = 1.0 if len(weight.shape) == 1 else 1.5 / np.sqrt(np.prod(weight.shape[:-1]))
        weight.assign(rng.normal(0, scale, weight.shape).astype("float32"))
    return model


def test_per_token_gates_of_a_gru_gate_language_model_are_z(tmp_path):
    """token_gates reads z of the embedder's highway layers: NumPy's gate on the pooled CNN
    features (the same embedder without highway layers), token by token; gate_parameters
    reports z's bias -b_g."""
    from training.data.text import load_corpus
    from zoo.analysis.tokens import gate_parameters, token_gates

    corpus = load_corpus(_corpus_dir(tmp_path / "corpus"), max_word_length=12)
    model = small_lm(corpus, "gru_gate")
    embedder = model.get_layer("embedder")
    bare = CharCNNEmbedder.from_config({**embedder.get_config(), "highway_layers": 0})
    bare.build((None, 12))
    for mine, theirs in zip(bare.weights, embedder.weights):  # the CNN, in the same order
        mine.assign(theirs)
    h = keras.ops.convert_to_numpy(bare(corpus.test.chars)).astype(np.float64)
    zs = []
    for layer in embedder.highways:
        z, h = numpy_gru(h, numpy_weights(layer), activation="relu")
        zs.append(z)
    gates = token_gates(model, corpus, "test", batch_size=3)
    assert gates.gate == "T" and gates.variant == "gru_gate"
    np.testing.assert_allclose(gates.values[gates.token_type], np.stack(zs, axis=1), atol=2e-5)
    assert np.ptp(gates.values) > 0.2
    bias = [-keras.ops.convert_to_numpy(layer.gate_bias) for layer in embedder.highways]
    assert gate_parameters(model, "T")["bias_mean"] == pytest.approx(
        [float(b.mean()) for b in bias], abs=1e-6)
    with pytest.raises(ValueError, match=r"gate must be one the variant 'gru_gate' learns \(T\)"):
        token_gates(model, corpus, "test", gate="C")


# == the static skips ============================================================================

def static_net(variant, stacked, depth=4, width=6, seed=0):
    """A FC net of a static skip, every highway weight random (the skip's own included)."""
    keras.utils.set_random_seed(seed)
    model = zoo.load(FC, depth=depth, width=width, variant=variant, stacked=stacked)
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, HighwayDense | HighwayStack):
            for w in layer.weights:
                w.assign((rng.normal(size=w.shape) * 0.6 + 0.1).astype(np.float32))
    return model


def forward_pairs(model, x):
    """Per highway layer: its input, its output (the net's forward pass) and H of its input
    (NumPy, from the layer's kernel and bias)."""
    stem = keras.Model(model.inputs[0], model.get_layer("stem_dense").output)
    h = keras.ops.convert_to_numpy(stem(x))
    pairs = []
    stacks = [layer for layer in model.layers if isinstance(layer, HighwayStack)]
    if stacks:
        stack = stacks[0]
        ins = keras.ops.convert_to_numpy(stack.layer_inputs(h))
        outs = keras.ops.convert_to_numpy(stack.layer_outputs(h))
        kernel, bias = (keras.ops.convert_to_numpy(w) for w in (stack.kernel, stack.bias))
        for i in range(stack.depth):
            pairs.append((ins[i], outs[i], np.tanh(ins[i] @ kernel[i] + bias[i])))
        return pairs
    for layer in model.layers:
        if isinstance(layer, HighwayDense):
            y = keras.ops.convert_to_numpy(layer(h))
            kernel, bias = (keras.ops.convert_to_numpy(w) for w in (layer.kernel, layer.bias))
            pairs.append((h, y, np.tanh(h @ kernel + bias)))
            h = y
    return pairs


def recovered_scales(variant, pairs):
    """The scales that make each layer's output what it is, by least squares on the forward
    pass: y - x = a H (rezero), y - x = l_j H_j per channel (layerscale), y = a H + b x
    (laurel_rw), y - H - x = x M (laurel_lr: the norms of M)."""
    found = {}
    for x, y, h in (tuple(np.asarray(a, np.float64) for a in pair) for pair in pairs):
        if variant == "rezero":
            row = {"alpha": np.sum((y - x) * h) / np.sum(h * h)}
        elif variant == "layerscale":
            scale = np.sum((y - x) * h, axis=0) / np.sum(h * h, axis=0)
            row = {"lambda_mean": scale.mean(), "lambda_min": scale.min(),
                   "lambda_max": scale.max()}
        elif variant == "laurel_rw":
            (a, b), *_ = np.linalg.lstsq(np.stack([h.ravel(), x.ravel()], 1), y.ravel(),
                                         rcond=None)
            row = {"alpha": a, "beta": b}
        else:
            matrix, *_ = np.linalg.lstsq(x, y - h - x, rcond=None)
            row = {"ba_frobenius": np.linalg.norm(matrix, "fro"),
                   "ba_spectral": np.linalg.norm(matrix, 2)}
        for key, value in row.items():
            found.setdefault(key, []).append(float(value))
    return found


@pytest.mark.parametrize("variant", STATIC_SKIPS)
def test_skip_scales_are_what_the_layers_do(variant):
    """skip_scales' numbers, per layer, for the per-layer and the stacked net, equal the scales
    recovered from the forward pass; they differ by layer, so a mix-up shows."""
    from zoo.analysis import skip_scales

    x = images(40, seed=4)
    for stacked in (False, True):
        model = static_net(variant, stacked)
        report = skip_scales(model)
        assert report["variant"] == variant and report["layers"] == [
            "highway_1", "highway_2", "highway_3"]
        assert report["note"] == no_routing(variant)
        expected = recovered_scales(variant, forward_pairs(model, x))
        assert list(report["scales"]) == list(expected)
        for key, values in expected.items():
            np.testing.assert_allclose(report["scales"][key], values, rtol=1e-4, atol=1e-5,
                                       err_msg=f"{variant} stacked={stacked} {key}")
            assert np.ptp(values) > 1e-3, key


def test_fresh_static_skips_report_their_initial_scales():
    from zoo.analysis import skip_scales

    fresh = {"rezero": {"alpha": 0.0}, "layerscale": {"lambda_mean": 1e-5, "lambda_max": 1e-5},
             "laurel_rw": {"alpha": 1.0, "beta": 1.0}, "laurel_lr": {"ba_spectral": 0.0}}
    for variant, scales in fresh.items():
        report = skip_scales(zoo.load(FC, depth=3, variant=variant, stacked=True))
        for key, value in scales.items():
            assert report["scales"][key] == pytest.approx([value] * 2, abs=1e-9), variant


def _one_line_error(capsys, argv, expected):
    code = cli.main(argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (argv, code, captured.err)
    assert lines[0] == f"highway-zoo analyze: error: {expected}", lines[0]


@pytest.mark.parametrize("variant, stacked", [("rezero", False), ("layerscale", True)])
def test_cli_analyze_writes_the_scales_of_a_static_skip_and_refuses_routing(
        variant, stacked, tmp_path, capsys):
    model = static_net(variant, stacked)
    weights = tmp_path / "run"
    zoo.save(model, weights)
    out = tmp_path / "analysis"
    assert cli.main(["analyze", FC, "--weights", str(weights), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    line = no_routing(variant)
    assert f"{FC}: {line}; its learned skip scales per layer:" in printed
    assert sorted(p.name for p in out.iterdir()) == ["skip_scales.json", "skip_scales.png"]
    assert (out / "skip_scales.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "skip_scales.json").read_text())
    assert report["architecture"] == FC and report["variant"] == variant
    expected = recovered_scales(variant, forward_pairs(model, images(40, seed=4)))
    for key, values in expected.items():
        np.testing.assert_allclose(report["scales"][key], values, rtol=1e-4, atol=1e-5)
    # Routing needs T per example: the one line, exit status 2, nothing written.
    _one_line_error(capsys, ["analyze", FC, "--weights", str(weights), "--routing", "--out",
                             str(tmp_path / "routing")], f"{line}.")
    assert not (tmp_path / "routing").exists()


def test_routing_and_token_gates_refuse_a_static_skip_in_one_line(tmp_path, capsys):
    from zoo.analysis.routing import routing_patterns
    from zoo.analysis.tokens import token_gates

    for variant in STATIC_SKIPS:
        with pytest.raises(ValueError) as refused:
            routing_patterns(zoo.load(FC, depth=3, variant=variant), images(2))
        assert str(refused.value) == f"{no_routing(variant)}."
    corpus_dir = _corpus_dir(tmp_path / "corpus")
    from training.data.text import load_corpus

    corpus = load_corpus(corpus_dir, max_word_length=12)
    model = small_lm(corpus, "laurel_rw")
    with pytest.raises(ValueError) as refused:
        token_gates(model, corpus)
    assert str(refused.value) == f"{no_routing('laurel_rw')}."
    run = zoo.save(model, tmp_path / "lm")
    _one_line_error(capsys, ["analyze", LM, "--weights", str(run), "--corpus", str(corpus_dir),
                             "--out", str(tmp_path / "tokens")], f"{no_routing('laurel_rw')}.")
    assert not (tmp_path / "tokens").exists()
