"""The gated skips (`layers.variants.GATED_SKIPS`): ReZero / SkipInit, LayerScale, GTrXL's GRU
gate and LAuReL's RW and LR forms, as `variant`s of HighwayDense, HighwayConv2D, HighwayStack
(with its fast paths) and CharCNNEmbedder.

The NumPy references below are this file's own, written from the papers' formulas (float64);
gradients are their central finite differences. TensorFlow runs in the pytest process, JAX and
PyTorch in one child process each (`test_backends.run_on_backend`), all three against one
reference computed once.
"""

import keras
import numpy as np
import pytest
from test_backends import OTHER_BACKENDS, assert_close, output_and_gradients, run_on_backend

from layers import CharCNNEmbedder, HighwayConv2D, HighwayDense, HighwayStack
from layers.variants import ALL_VARIANTS, GATED_SKIPS, VARIANTS, parameter_count

D, C, K, DEPTH, BATCH, RANK = 5, 3, 3, 3, 3, 2
KINDS = ("dense", "conv", "stack")
CASES = [f"{kind}/{variant}" for kind in KINDS for variant in GATED_SKIPS]
NEW_ARGUMENTS = {"layerscale_init", "gru_gate_bias", "laurel_rank"}


# == NumPy references =============================================================================

def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _conv_same(x, kernel):
    """Stride 1, zero "same" padding (pad (k-1)//2 before), channels last."""
    kh, kw = kernel.shape[:2]
    rows, cols = x.shape[1:3]
    padded = np.pad(x, ((0, 0), ((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)))
    return sum(padded[:, i:i + rows, j:j + cols] @ kernel[i, j]
               for i in range(kh) for j in range(kw))


def reference_layer(variant, x, w, linear):
    """One layer of a gated skip with H = tanh(linear(x, W_H) + b_H); `w` by weight name."""
    h = np.tanh(linear(x, w["kernel"]) + w["bias"])
    if variant == "rezero":  # Bachlechner et al. 2020
        return x + w["alpha"] * h
    if variant == "layerscale":  # Touvron et al. 2021
        return x + w["layer_scale"] * h
    if variant == "laurel_rw":  # Menghani et al. 2025, LAuReL-RW
        return w["alpha"] * h + w["beta"] * x
    if variant == "laurel_lr":  # LAuReL-LR: x + B A x added to H
        return h + x + x @ w["laurel_a"] @ w["laurel_b"]
    assert variant == "gru_gate"  # Parisotto et al. 2019, with y = H(x)
    d = x.shape[-1]
    gw, gu = w["gate_kernel"], w["gate_recurrent_kernel"]
    wr, wz, wg = (gw[..., i * d:(i + 1) * d] for i in range(3))
    ur, uz, ug = (gu[..., i * d:(i + 1) * d] for i in range(3))
    r = _sigmoid(linear(h, wr) + linear(x, ur))
    z = _sigmoid(linear(h, wz) + linear(x, uz) - w["gate_bias"])
    g = np.tanh(linear(h, wg) + linear(r * x, ug))
    return (1 - z) * x + z * g


def reference(kind, variant, x, weights):
    """The case's output; `weights` a dict by name (stacked `(depth, ...)` for a stack)."""
    if kind == "stack":
        for i in range(DEPTH):
            x = reference_layer(variant, x, {k: v[i] for k, v in weights.items()}, np.matmul)
        return x
    return reference_layer(variant, x, weights, _conv_same if kind == "conv" else np.matmul)


def finite_differences(loss, arrays, eps=1e-6):
    """dloss/darray for each array (changed in place and restored), central differences."""
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        for i in np.ndindex(a.shape):
            old = a[i]
            a[i] = old + eps
            up = loss()
            a[i] = old - eps
            down = loss()
            a[i] = old
            g[i] = (up - down) / (2 * eps)
        grads.append(g)
    return grads


# == the layers on a backend ======================================================================

def build_case(name):
    """(model, layer) of one case: one layer of `variant`, tanh H, non-default arguments."""
    kind, variant = name.split("/")
    common = dict(activation="tanh", variant=variant, laurel_rank=RANK, layerscale_init=0.1,
                  gru_gate_bias=1.0)
    if kind == "dense":
        layer, shape = HighwayDense(**common), (D,)
    elif kind == "conv":
        layer, shape = HighwayConv2D(K, **common), (4, 4, C)
    elif kind == "conv_cf":
        layer, shape = HighwayConv2D(K, data_format="channels_first", **common), (C, 4, 4)
    else:
        layer, shape = HighwayStack(DEPTH, **common), (D,)
    inputs = keras.Input(shape)
    return keras.Model(inputs, layer(inputs)), layer


def forms_on_this_backend(out, arrays):
    """Each case's output and gradients (input, then every weight) with the weights in
    `arrays`, into `out`; on PyTorch (channels first natively; TensorFlow's CPU convolution
    takes channels last only, and JAX's would add half a minute of compiling) also
    HighwayConv2D with channels first, on the same weights."""
    names = list(CASES)
    if keras.backend.backend() == "torch":
        names += [f"conv_cf/{variant}" for variant in GATED_SKIPS]
    for name in names:
        kind, variant = name.split("/")
        source = name.replace("conv_cf", "conv")
        model, layer = build_case(name)
        for i, weight in enumerate(layer.weights):
            weight.assign(arrays[f"{source}/w{i}"])
        x = arrays[f"{source.split('/')[0]}/x"]
        if kind == "conv_cf":
            x = x.transpose(0, 3, 1, 2)
        # (JAX: the stack jitted, as fit runs it; single layers op by op, cheaper to start.)
        y, grads = output_and_gradients(model, x, training=True, jit=kind == "stack")
        if kind == "conv_cf":
            y, grads[0] = y.transpose(0, 2, 3, 1), grads[0].transpose(0, 2, 3, 1)
        out[f"{name}/y"] = y
        for i, g in enumerate(grads):
            out[f"{name}/g{i}"] = g


@pytest.fixture(scope="module")
def references():
    """Random weights and inputs per case (shapes from TensorFlow's layers), the NumPy output
    and the finite-difference gradients of sum(sin(y)) (what `output_and_gradients` takes)."""
    rng = np.random.default_rng(31)
    arrays = {"dense/x": rng.normal(size=(BATCH, D)), "conv/x": rng.normal(size=(2, 4, 4, C)),
              "stack/x": rng.normal(size=(BATCH, D))}
    expected = {}
    for name in CASES:
        kind, variant = name.split("/")
        _, layer = build_case(name)
        # (float32 first: the layers get these values, the reference their float64 copies.)
        values = [np.array(rng.normal(size=w.shape) * 0.5, np.float32) for w in layer.weights]
        for i, v in enumerate(values):
            arrays[f"{name}/w{i}"] = v
        values = [v.astype(np.float64) for v in values]
        x = arrays[f"{kind}/x"].astype(np.float32).astype(np.float64)
        weights = dict(zip((w.name for w in layer.weights), values))

        def loss():
            return np.sum(np.sin(reference(kind, variant, x, weights)))  # noqa: B023

        expected[f"{name}/y"] = reference(kind, variant, x, weights)
        for i, g in enumerate(finite_differences(loss, [x, *values])):
            expected[f"{name}/g{i}"] = g
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    return arrays, expected


def _compare(out, expected, backend):
    for key, value in expected.items():
        assert_close(out[key], value, f"{backend} {key}", rtol=1e-4, atol=1e-5)
    if backend == "torch":
        for key, value in expected.items():
            if key.startswith("conv/"):
                assert_close(out[key.replace("conv/", "conv_cf/")], value,
                             f"{backend} channels first {key}", rtol=1e-4, atol=1e-5)


def test_forms_match_numpy_on_tensorflow(references):
    """Outputs and gradients (input and every weight) of HighwayDense, HighwayConv2D and
    HighwayStack (TensorFlow's fast path for rezero, layerscale, laurel_rw; keras.ops.scan for
    gru_gate, laurel_lr) equal the NumPy reference's, with random weights."""
    arrays, expected = references
    out = {}
    forms_on_this_backend(out, arrays)
    _compare(out, expected, "tensorflow")


@pytest.mark.backends
@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_forms_match_numpy_on_jax_and_torch(backend, references, tmp_path):
    """As on TensorFlow (the stack on JAX's scan / PyTorch's loop with the written-out backward
    pass for the scaled skips), plus HighwayConv2D with channels first on PyTorch."""
    arrays, expected = references
    out = run_on_backend(backend, """
        import test_gated_skips
        test_gated_skips.forms_on_this_backend(OUT, IN)
    """, tmp_path, **arrays)
    _compare(out, expected, backend)


def test_stack_autodiff_equals_its_written_out_backward_pass():
    """The scaled skips' hand-written gradients (TensorFlow's loop) equal autodiff through
    keras.ops.scan, at a depth (9) where the loop runs chunks and a remainder (unroll 4)."""
    x = np.random.default_rng(5).normal(size=(4, D)).astype(np.float32)
    for variant in ("rezero", "layerscale", "laurel_rw"):
        stack = HighwayStack(9, activation="tanh", variant=variant)
        stack.build((None, D))
        for i, w in enumerate(stack.weights):
            w.assign(np.random.default_rng(i).normal(size=w.shape).astype(np.float32) * 0.5)
        inputs = keras.Input((D,))
        fast = output_and_gradients(keras.Model(inputs, stack(inputs)), x, training=True)
        stack.hand_written_backward = False
        scan = output_and_gradients(keras.Model(inputs, stack(inputs)), x, training=True)
        for a, b in zip([fast[0], *fast[1]], [scan[0], *scan[1]], strict=True):
            assert_close(a, b, variant)


# == the character embedder =======================================================================

@pytest.mark.parametrize("variant", GATED_SKIPS)
def test_embedder_runs_its_features_through_the_form(variant):
    """CharCNNEmbedder's highway layers are the form (with its arguments): its output is the
    NumPy reference applied twice to the pooled features of the same embedder without them."""
    kwargs = dict(char_vocab_size=12, char_embedding_dim=4, filters=(3, 3), kernel_sizes=(1, 2),
                  highway_activation="tanh", laurel_rank=RANK, layerscale_init=0.3)
    chars = np.array([[[1, 5, 6, 2, 0], [1, 7, 2, 3, 4]]])
    embedder = CharCNNEmbedder(highway_layers=2, highway_variant=variant, **kwargs)
    bare = CharCNNEmbedder(highway_layers=0, highway_variant=variant, **kwargs)
    embedder(chars), bare(chars)
    rng = np.random.default_rng(7)
    for w in embedder.weights:
        w.assign(rng.normal(size=w.shape).astype(np.float32) * 0.5)
    for mine, theirs in zip(bare.weights, embedder.weights):  # the CNN, in the same order
        mine.assign(theirs)
    features = keras.ops.convert_to_numpy(bare(chars)).astype(np.float64)
    for highway in embedder.highways:
        assert highway.variant == variant
        weights = {w.name: keras.ops.convert_to_numpy(w).astype(np.float64)
                   for w in highway.weights}
        features = reference_layer(variant, features, weights, np.matmul)
    assert_close(keras.ops.convert_to_numpy(embedder(chars)), features, variant)
    if variant == "layerscale":
        assert embedder.get_config()["layerscale_init"] == 0.3


# == initial state ================================================================================

def _fresh(kind, variant, **kwargs):
    """A fresh (default-initialised) layer of `kind` and its output on random input."""
    rng = np.random.default_rng(11)
    if kind == "conv":
        layer, x = HighwayConv2D(K, variant=variant, **kwargs), rng.normal(size=(2, 4, 4, C))
    elif kind == "stack":
        layer, x = HighwayStack(DEPTH, variant=variant, **kwargs), rng.normal(size=(BATCH, D))
    else:
        layer, x = HighwayDense(variant=variant, **kwargs), rng.normal(size=(BATCH, D))
    x = x.astype(np.float32)
    return layer, x, keras.ops.convert_to_numpy(layer(x))


@pytest.mark.parametrize("kind", KINDS)
def test_fresh_layers_start_where_their_papers_say(kind):
    # ReZero / SkipInit: alpha = 0, exactly the identity.
    _, x, y = _fresh(kind, "rezero")
    np.testing.assert_array_equal(y, x)
    # LayerScale: within lambda of the identity per layer (|tanh| <= 1), and not the identity.
    _, x, y = _fresh(kind, "layerscale", activation="tanh", layerscale_init=1e-3)
    depth = DEPTH if kind == "stack" else 1
    assert 0 < np.abs(y - x).max() <= 1e-3 * depth * 1.01
    # LAuReL: alpha = beta = 1 and B = 0, exactly the residual layer y = H(x) + x it replaces.
    for variant in ("laurel_rw", "laurel_lr"):
        layer, x, y = _fresh(kind, variant)
        residual = {"conv": HighwayConv2D(K, variant="residual"),
                    "stack": HighwayStack(DEPTH, variant="residual"),
                    "dense": HighwayDense(variant="residual")}[kind]
        residual.build(x.shape)
        residual.kernel.assign(layer.kernel)
        residual.bias.assign(layer.bias)
        np.testing.assert_array_equal(y, keras.ops.convert_to_numpy(residual(x)), variant)
    # GTrXL: z starts near sigmoid(-b_g): the larger b_g, the nearer the identity.
    distances = [np.abs(_fresh(kind, "gru_gate", gru_gate_bias=b)[2] - x).max()
                 for b in (0.0, 2.0, 10.0)]
    assert distances[0] > distances[1] > distances[2] and distances[2] < 1e-2, distances
    assert distances[0] > 0.1


# == parameter counts =============================================================================

@pytest.mark.parametrize("variant", GATED_SKIPS)
def test_parameter_counts_by_formula(variant):
    d, c, r = 6, 4, 2
    a = 3 * 2  # a (3, 2) convolution window

    def count(k, n):  # one layer, kernel area k, n channels
        h = k * n * n + n  # W_H, b_H
        return h + {"rezero": 1, "layerscale": n, "gru_gate": 6 * k * n * n + n,
                    "laurel_rw": 2, "laurel_lr": 2 * r * n}[variant]

    dense = HighwayDense(variant=variant, laurel_rank=r)
    dense.build((None, d))
    conv = HighwayConv2D((3, 2), variant=variant, laurel_rank=r)
    conv.build((None, 5, 5, c))
    stack = HighwayStack(DEPTH, variant=variant, laurel_rank=r)
    stack.build((None, d))
    embedder = CharCNNEmbedder(char_vocab_size=10, char_embedding_dim=4, filters=(2, 4),
                               kernel_sizes=(1, 2), highway_layers=2, highway_variant=variant,
                               laurel_rank=r)
    embedder.build((None, 5))
    cnn = 10 * 4 + (1 * 4 * 2 + 2) + (2 * 4 * 4 + 4)
    assert dense.count_params() == count(1, d) == parameter_count(variant, d, laurel_rank=r)
    assert conv.count_params() == count(a, c) == parameter_count(variant, c, a, laurel_rank=r)
    assert stack.count_params() == DEPTH * count(1, d)
    assert embedder.count_params() == cnn + 2 * count(1, d)
    # The default rank is an eighth of the width, at least 1.
    wide = HighwayDense(variant="laurel_lr")
    wide.build((None, 16))
    assert tuple(wide.laurel_a.shape) == (16, 2) and tuple(wide.laurel_b.shape) == (2, 16)


def test_greff_variants_keep_their_weights_and_configs():
    for variant in VARIANTS:
        layer = HighwayDense(variant=variant)
        layer.build((None, D))
        assert [w.name for w in layer.weights] == ["kernel", "bias"]
        assert not NEW_ARGUMENTS & set(layer.get_config())
        assert not NEW_ARGUMENTS & set(HighwayStack(2, variant=variant).get_config())
        assert layer.count_params() == parameter_count(variant, D)


# == serialisation ================================================================================

@pytest.mark.parametrize("variant", GATED_SKIPS)
def test_configs_and_keras_files_round_trip(variant, tmp_path):
    args = dict(variant=variant, layerscale_init=0.02, gru_gate_bias=1.5, laurel_rank=RANK)
    inputs = keras.Input((4, 4, C))
    x = HighwayConv2D(K, name="conv", **args)(inputs)
    x = HighwayDense(name="dense", **args)(x)
    x = HighwayStack(2, name="stack", **args)(x)
    model = keras.Model(inputs, x)
    rng = np.random.default_rng(3)
    for w in model.weights:
        w.assign(rng.normal(size=w.shape).astype(np.float32) * 0.5)
    data = rng.normal(size=(2, 4, 4, C)).astype(np.float32)
    expected = keras.ops.convert_to_numpy(model(data))
    own = {"layerscale": ("layerscale_init", 0.02), "gru_gate": ("gru_gate_bias", 1.5),
           "laurel_lr": ("laurel_rank", RANK)}.get(variant)
    for layer in model.layers[1:]:
        config = layer.get_config()
        assert config["variant"] == variant
        assert NEW_ARGUMENTS & set(config) == ({own[0]} if own else set())
        if own:
            assert config[own[0]] == own[1]
        assert type(layer).from_config(config).get_config() == config
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(data)), expected)
    for a, b in zip(loaded.layers, model.layers, strict=True):
        assert a.get_config() == b.get_config()
    # A stack and its chain of HighwayDense layers convert both ways, skip weights included.
    stack = model.get_layer("stack")
    back = HighwayStack.from_layers(stack.to_layers())
    assert [w.name for w in back.weights] == [w.name for w in stack.weights]
    for a, b in zip(back.weights, stack.weights, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a),
                                      keras.ops.convert_to_numpy(b))


# == bad input ====================================================================================

@pytest.mark.parametrize("make, argument", [
    (lambda v: HighwayDense(variant=v), "variant"),
    (lambda v: HighwayConv2D(3, variant=v), "variant"),
    (lambda v: HighwayStack(2, variant=v), "variant"),
    (lambda v: CharCNNEmbedder(char_vocab_size=5, highway_variant=v), "highway_variant"),
])
def test_an_unknown_variant_is_one_line_listing_the_known(make, argument):
    with pytest.raises(ValueError) as refused:
        make("rezero_gate")
    message = str(refused.value)
    assert len(message.splitlines()) == 1
    assert f"Received: {argument}='rezero_gate'" in message
    assert all(f"'{name}'" in message for name in ALL_VARIANTS)


@pytest.mark.parametrize("kwargs, message", [
    (dict(variant="laurel_lr", laurel_rank=0), "laurel_rank must be None or an integer >= 1"),
    (dict(variant="layerscale", layerscale_init=float("nan")), "layerscale_init must be a"),
    (dict(variant="gru_gate", gru_gate_bias="2"), "gru_gate_bias must be a finite number"),
])
def test_bad_arguments_are_refused_in_one_line(kwargs, message):
    with pytest.raises(ValueError, match=message) as refused:
        HighwayDense(**kwargs)
    assert len(str(refused.value).splitlines()) == 1


def test_rank_above_the_width_and_gate_analyses_of_static_skips_are_refused():
    with pytest.raises(ValueError, match=r"laurel_rank \(6\) must be at most the channels \(5\)"):
        HighwayDense(variant="laurel_lr", laurel_rank=6).build((None, 5))
    layer = HighwayDense(variant="layerscale")
    with pytest.raises(ValueError, match="has no transform gate; no routing: layerscale "
                       "scales every example alike") as refused:
        layer.transform_gate(np.ones((1, 4), np.float32))
    assert len(str(refused.value).splitlines()) == 1
    with pytest.raises(ValueError, match="has no carry gate; no routing: rezero"):
        HighwayStack(2, variant="rezero").carry_gates(np.ones((1, 4), np.float32))
    # gru_gate's gate is its update gate z (tests/test_skip_analysis.py checks the values).
    assert tuple(HighwayDense(variant="gru_gate").transform_gate(
        np.ones((1, 4), np.float32)).shape) == (1, 4)


def test_gate_analyses_and_exports_leave_the_static_skips_out():
    import zoo
    from zoo.analysis.gates import highway_layers, no_gates_reason, skip_layers

    for stacked in (False, True):
        model = zoo.load("highway_fc10_mnist", depth=3, variant="rezero", stacked=stacked)
        assert highway_layers(model) == []
        assert [layer.name for layer in skip_layers(model)] == ["highway_1", "highway_2"]
        assert no_gates_reason(model) == (
            "no routing: rezero scales every example alike (a learned scalar per layer), so "
            "Fig. 2-4, routing and per-token gates do not apply.")
        gru = zoo.load("highway_fc10_mnist", depth=3, variant="gru_gate", stacked=stacked)
        assert [layer.name for layer in highway_layers(gru)] == ["highway_1", "highway_2"]
        assert skip_layers(gru) == []


def test_a_lesioned_layer_of_a_stack_is_skipped():
    """Lesioning (the analyses' path, keras.ops.scan) passes a layer's input on unchanged: a
    stack with layer 1 lesioned computes its HighwayDense layers 0 and 2 in a row."""
    x = np.random.default_rng(2).normal(size=(BATCH, D)).astype(np.float32)
    for variant in GATED_SKIPS:
        stack = HighwayStack(DEPTH, activation="tanh", variant=variant, laurel_rank=RANK)
        stack.build((None, D))
        for i, w in enumerate(stack.weights):
            w.assign(np.random.default_rng(i).normal(size=w.shape).astype(np.float32) * 0.5)
        first, _, last = stack.to_layers()
        stack.lesioned_layers = {1}
        assert_close(keras.ops.convert_to_numpy(stack(x)),
                     keras.ops.convert_to_numpy(last(first(x))), variant)


@pytest.mark.parametrize("variant", ["gru_gate", "laurel_lr"])
def test_a_stack_of_these_forms_converts_to_tflite_and_onnx(variant, tmp_path):
    # A stack of these forms runs a loop of its own (no fast path). At inference it stacks
    # nothing per layer, so the TFLite converter and tf2onnx take it (a scan's TensorList
    # they refused); the files give the Keras net's outputs.
    import onnxruntime

    import zoo
    import zoo.serving.tflite

    keras.utils.set_random_seed(0)
    model = zoo.load("highway_fc10_mnist", depth=4, width=8, variant=variant, stacked=True)
    rng = np.random.default_rng(0)
    for weight in model.get_layer("highway_stack").weights:  # B = 0 and b_g alike at first
        weight.assign(keras.ops.convert_to_numpy(weight) + rng.normal(0, 0.3, weight.shape))
    x = rng.uniform(0, 255, (5, 28, 28, 1)).astype(np.float32)
    expected = model.predict(x, verbose=0)
    lite = zoo.serving.tflite.load(zoo.export(model, base_dir=tmp_path, format="tflite"))
    np.testing.assert_allclose(lite(x)["probabilities"], expected, rtol=1e-4, atol=1e-6)
    session = onnxruntime.InferenceSession(
        str(zoo.export(model, base_dir=tmp_path, format="onnx")),
        providers=["CPUExecutionProvider"])
    (probabilities,) = session.run(["probabilities"], {"pixels": x})
    np.testing.assert_allclose(probabilities, expected, rtol=1e-4, atol=1e-6)
