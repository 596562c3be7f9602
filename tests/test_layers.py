"""Tests of layers/: highway layers against NumPy references, their initialisation, and GCN."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_test_helper import (
    channels_first_call,
    character_ids,
    run_layer_battery,
)

import layers
from layers import (
    VARIANTS,
    BNHighwayBlock,
    CaffeImageNetPreprocessing,
    CharCNNEmbedder,
    GlobalContrastNormalization,
    HighwayConv2D,
    HighwayDense,
    HighwayStack,
)
from layers._highway import combine, combine_backward

# The branches each variant learns, in their order in the fused kernel (written out independently
# of the implementation).
BRANCHES = {"coupled": "ht", "full": "htc", "c_only": "hc", "t_only": "ht", "residual": "h",
            "plain": "h"}
ACTIVATIONS = {"relu": lambda z: np.maximum(z, 0.0), "tanh": np.tanh}
ACTIVATION_GRADS = {
    "relu": lambda z: (z > 0).astype(z.dtype),
    "tanh": lambda z: 1 - np.tanh(z) ** 2,
}


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def conv_same(x, kernel):
    """Direct 'same' zero-padded, stride-1 cross-correlation; x is NHWC, kernel (kh, kw, c, o)."""
    kh, kw = kernel.shape[:2]
    top, left = (kh - 1) // 2, (kw - 1) // 2
    padded = np.pad(x, ((0, 0), (top, kh - 1 - top), (left, kw - 1 - left), (0, 0)))
    rows, cols = x.shape[1:3]
    out = np.zeros((*x.shape[:3], kernel.shape[-1]))
    for i in range(kh):
        for j in range(kw):
            out += padded[:, i : i + rows, j : j + cols, :] @ kernel[i, j]
    return out


def reference(z, x, variant, activation):
    """H, T, C and y = H·T + x·C from the fused pre-activations z (channels on the last axis)."""
    parts = dict(zip(BRANCHES[variant], np.split(z, len(BRANCHES[variant]), axis=-1)))
    ones = np.ones_like(x)
    h = ACTIVATIONS[activation](parts["h"])
    t = sigmoid(parts["t"]) if "t" in parts else ones
    if variant == "coupled":
        c = 1 - t
    elif variant == "plain":  # Greff's Plain: y = H, no carry
        c = np.zeros_like(x)
    else:
        c = sigmoid(parts["c"]) if "c" in parts else ones
    return {"y": h * t + x * c, "h": h, "t": t, "c": c}


def randomize(layer, rng, scale=0.5):
    for weight in layer.weights:
        weight.assign(scale * rng.normal(size=weight.shape))


def layer_outputs(layer, x, call=lambda fn: fn):
    """The layer's y, H, T and C on `x`, each computed by `call(method)`."""
    values = {
        "y": call(layer)(x),
        "h": call(layer.block_state)(x),
        "t": call(layer.transform_gate)(x),
        "c": call(layer.carry_gate)(x),
    }
    return {key: keras.ops.convert_to_numpy(value) for key, value in values.items()}


def assert_matches(actual, expected):
    for key in expected:
        assert actual[key].shape == expected[key].shape, key
        np.testing.assert_allclose(actual[key], expected[key], rtol=1e-5, atol=1e-5, err_msg=key)


# Forward pass against NumPy ----------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_dense_matches_numpy(variant, activation):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 6)).astype("float32")
    layer = HighwayDense(activation=activation, variant=variant)
    layer.build(x.shape)
    randomize(layer, rng)
    z = x.astype("float64") @ layer.kernel.numpy() + layer.bias.numpy()
    assert_matches(layer_outputs(layer, x), reference(z, x, variant, activation))


def test_dense_matches_numpy_on_rank_3_inputs():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 4)).astype("float32")
    layer = HighwayDense(variant="full")
    layer.build(x.shape)
    randomize(layer, rng)
    z = x.astype("float64") @ layer.kernel.numpy() + layer.bias.numpy()
    assert_matches(layer_outputs(layer, x), reference(z, x, "full", "relu"))


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_conv_matches_numpy(variant, activation):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 6, 3)).astype("float32")
    layer = HighwayConv2D(3, activation=activation, variant=variant, data_format="channels_last")
    layer.build(x.shape)
    randomize(layer, rng)
    z = conv_same(x.astype("float64"), layer.kernel.numpy()) + layer.bias.numpy()
    assert_matches(layer_outputs(layer, x), reference(z, x, variant, activation))


@pytest.mark.parametrize("variant", ["coupled", "full"])
def test_conv_channels_first_and_rectangular_kernel_match_numpy(variant):
    rng = np.random.default_rng(4)
    x_last = rng.normal(size=(2, 5, 4, 3)).astype("float32")
    x = np.transpose(x_last, (0, 3, 1, 2))
    layer = HighwayConv2D((3, 2), variant=variant, data_format="channels_first")
    layer.build(x.shape)
    randomize(layer, rng)
    z = conv_same(x_last.astype("float64"), layer.kernel.numpy()) + layer.bias.numpy()
    expected = {
        key: np.transpose(value, (0, 3, 1, 2))
        for key, value in reference(z, x_last, variant, "relu").items()
    }
    assert_matches(layer_outputs(layer, x, call=channels_first_call), expected)


# Gradients ----------------------------------------------------------------------------------------


def test_coupled_combine_gradients_match_paper_appendix():
    rng = np.random.default_rng(5)
    x, h, dy = (rng.normal(size=(4, 7)) for _ in range(3))
    t = sigmoid(rng.normal(size=(4, 7)))
    x_, h_, t_ = (tf.constant(a) for a in (x, h, t))
    with tf.GradientTape() as tape:
        tape.watch([x_, h_, t_])
        y = combine("coupled", x_, h_, t_)
    dx, dh, dt = (g.numpy() for g in tape.gradient(y, [x_, h_, t_], output_gradients=dy))
    np.testing.assert_allclose(y.numpy(), h * t + x * (1 - t), rtol=1e-12)
    np.testing.assert_allclose(dh, t * dy, rtol=1e-12)
    np.testing.assert_allclose(dt, (h - x) * dy, rtol=1e-12)
    np.testing.assert_allclose(dx, (1 - t) * dy, rtol=1e-12)


def test_full_combine_gradients():
    rng = np.random.default_rng(6)
    x, h, dy = (rng.normal(size=(4, 7)) for _ in range(3))
    t, c = (sigmoid(rng.normal(size=(4, 7))) for _ in range(2))
    tensors = [tf.constant(a) for a in (x, h, t, c)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        y = combine("full", *tensors)
    dx, dh, dt, dc = (g.numpy() for g in tape.gradient(y, tensors, output_gradients=dy))
    np.testing.assert_allclose(dh, t * dy, rtol=1e-12)
    np.testing.assert_allclose(dt, h * dy, rtol=1e-12)
    np.testing.assert_allclose(dc, x * dy, rtol=1e-12)
    np.testing.assert_allclose(dx, c * dy, rtol=1e-12)


# The gates each variant's combine takes (None: not learned).
COMBINE_GATES = {"coupled": "t", "full": "tc", "c_only": "c", "t_only": "t", "residual": "",
                 "plain": ""}


@pytest.mark.parametrize("variant", VARIANTS)
def test_combine_backward_is_the_gradient_of_combine(variant):
    """The hand-written backward of the JAX and PyTorch stacks, against TensorFlow's autodiff
    of the forward formula, for every variant (with the gates it learns)."""
    rng = np.random.default_rng(7)
    x, h, dy = (rng.normal(size=(3, 5)) for _ in range(3))
    gates = {g: sigmoid(rng.normal(size=(3, 5))) for g in COMBINE_GATES[variant]}
    t, c = gates.get("t"), gates.get("c")
    inputs = {"x": x, "h": h, **gates}
    tensors = {k: tf.constant(v) for k, v in inputs.items()}
    with tf.GradientTape() as tape:
        tape.watch(list(tensors.values()))
        y = combine(variant, tensors["x"], tensors["h"], tensors.get("t"), tensors.get("c"))
    grads = tape.gradient(y, tensors, output_gradients=dy)
    dx, dh, dt, dc = combine_backward(variant, x, h, t, c, dy)
    for name, mine in (("x", dx), ("h", dh), ("t", dt), ("c", dc)):
        autodiff = grads.get(name)
        if mine is None:  # not an input of y: no gradient (x in "plain"), or a gate not learned
            assert autodiff is None or not np.any(autodiff.numpy()), name
        else:
            np.testing.assert_allclose(mine, autodiff.numpy(), rtol=1e-12, err_msg=name)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_dense_input_and_weight_gradients_match_numpy(activation):
    rng = np.random.default_rng(7)
    d = 5
    x = rng.normal(size=(6, d)).astype("float32")
    dy = rng.normal(size=(6, d)).astype("float32")
    layer = HighwayDense(activation=activation)
    layer.build(x.shape)
    randomize(layer, rng)
    kernel, bias = layer.kernel.numpy().astype("float64"), layer.bias.numpy().astype("float64")
    w_h, w_t = kernel[:, :d], kernel[:, d:]
    z_h, z_t = x @ w_h + bias[:d], x @ w_t + bias[d:]
    h, t = ACTIVATIONS[activation](z_h), sigmoid(z_t)
    dz_h = ACTIVATION_GRADS[activation](z_h) * t * dy
    dz_t = t * (1 - t) * (h - x) * dy
    expected_dx = (1 - t) * dy + dz_h @ w_h.T + dz_t @ w_t.T
    expected_dkernel = x.T @ np.concatenate([dz_h, dz_t], axis=1)
    expected_dbias = np.concatenate([dz_h, dz_t], axis=1).sum(axis=0)

    x_ = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x_)
        y = layer(x_)
    dx, dkernel, dbias = tape.gradient(y, [x_, layer.kernel.value, layer.bias.value], dy)
    np.testing.assert_allclose(dx.numpy(), expected_dx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dkernel.numpy(), expected_dkernel, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dbias.numpy(), expected_dbias, rtol=1e-4, atol=1e-5)


# Initialisation -----------------------------------------------------------------------------------


def gauss_expectation_of_sigmoid(mean, stds):
    """Average over units of E[sigmoid(mean + std·ξ)], ξ ~ N(0, 1) (Gauss-Hermite quadrature)."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)
    weights = weights / weights.sum()
    return float(np.mean(sigmoid(mean + np.outer(stds, nodes)) @ weights))


@pytest.mark.parametrize("b_t", [-1.0, -2.0, -3.0])
def test_initial_transform_gate_on_zero_mean_inputs(b_t):
    keras.utils.set_random_seed(0)
    d = 64
    x = np.random.default_rng(8).normal(size=(512, d)).astype("float32")
    layer = HighwayDense(transform_bias_initializer=b_t)
    t = keras.ops.convert_to_numpy(layer.transform_gate(x))
    # Pre-activations are centred on b_T, so the median gate is sigmoid(b_T); the mean sits a little
    # above it (sigmoid is convex there), by what the unit-variance spread of W_T·x predicts.
    assert abs(np.median(t) - sigmoid(b_t)) < 0.01
    assert abs(t.mean() - sigmoid(b_t)) < 0.05
    w_t = layer.kernel.numpy()[:, d:]
    predicted = gauss_expectation_of_sigmoid(b_t, np.linalg.norm(w_t, axis=0))
    assert abs(t.mean() - predicted) < 0.01


def test_initial_transform_gate_conv():
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(9).normal(size=(8, 8, 8, 16)).astype("float32")
    layer = HighwayConv2D(3, transform_bias_initializer=-2)
    t = keras.ops.convert_to_numpy(layer.transform_gate(x))
    assert abs(np.median(t) - sigmoid(-2.0)) < 0.01
    assert abs(t.mean() - sigmoid(-2.0)) < 0.05


def dense_layer(**kwargs):
    layer = HighwayDense(**kwargs)
    layer.build((None, 8))
    return layer


def conv_layer(**kwargs):
    layer = HighwayConv2D(3, **kwargs)
    layer.build((None, 5, 5, 8))
    return layer


@pytest.mark.parametrize("make_layer", [dense_layer, conv_layer])
@pytest.mark.parametrize(
    "argument, expected",
    [
        ({}, -2.0),
        ({"transform_bias_initializer": -3}, -3.0),
        ({"transform_bias_initializer": -1.5}, -1.5),
        ({"transform_bias_initializer": keras.initializers.Constant(-0.75)}, -0.75),
        ({"transform_bias_initializer": "zeros"}, 0.0),
    ],
)
def test_transform_bias_initializer_lands_on_the_transform_slice(make_layer, argument, expected):
    layer = make_layer(**argument)
    bias = layer.bias.numpy()
    np.testing.assert_array_equal(bias[:8], np.zeros(8))
    np.testing.assert_array_equal(bias[8:], np.full(8, expected, "float32"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.transform_bias), bias[8:])
    assert layer.carry_bias is None


@pytest.mark.parametrize(
    "variant, expected_h_t_c",
    [
        ("full", (0.1, -2.0, 2.0)),
        ("c_only", (0.1, None, 2.0)),
        ("t_only", (0.1, -2.0, None)),
        ("residual", (0.1, None, None)),
        ("plain", (0.1, None, None)),
    ],
)
def test_bias_slices_per_variant(variant, expected_h_t_c):
    layer = dense_layer(variant=variant, bias_initializer=0.1)
    expected = np.concatenate([np.full(8, v, "float32") for v in expected_h_t_c if v is not None])
    np.testing.assert_array_equal(layer.bias.numpy(), expected)
    for value, gate_bias in zip(expected_h_t_c[1:], (layer.transform_bias, layer.carry_bias)):
        if value is None:
            assert gate_bias is None
        else:
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(gate_bias), np.full(8, value))


def test_fresh_full_layer_starts_like_coupled_at_zero_input():
    layer = dense_layer(variant="full", kernel_initializer="zeros")
    x = np.zeros((1, 8), "float32")
    t = keras.ops.convert_to_numpy(layer.transform_gate(x))
    c = keras.ops.convert_to_numpy(layer.carry_gate(x))
    np.testing.assert_allclose(c, 1 - t, rtol=1e-6)


@pytest.mark.parametrize("make_layer", [dense_layer, conv_layer])
def test_kernel_slices_come_from_their_own_initializers(make_layer):
    layer = make_layer(
        variant="full", transform_kernel_initializer="zeros", carry_kernel_initializer="ones"
    )
    w_h, w_t, w_c = np.split(layer.kernel.numpy(), 3, axis=-1)
    assert np.all(w_h != 0)
    np.testing.assert_array_equal(w_t, np.zeros_like(w_t))
    np.testing.assert_array_equal(w_c, np.ones_like(w_c))


@pytest.mark.parametrize("make_layer", [dense_layer, conv_layer])
def test_shared_kernel_initializer_gives_distinct_reproducible_slices(make_layer):
    # One seeded initializer serves H, T and C; the slices must still differ, yet be reproducible.
    def seeded():
        return make_layer(variant="full", kernel_initializer=keras.initializers.GlorotUniform(3))

    w_h, w_t, w_c = np.split(seeded().kernel.numpy(), 3, axis=-1)
    assert not np.allclose(w_h, w_t) and not np.allclose(w_t, w_c) and not np.allclose(w_h, w_c)
    np.testing.assert_array_equal(seeded().kernel.numpy(), seeded().kernel.numpy())


@pytest.mark.parametrize(
    "make_layer, input_shape, fan_out",
    [
        (HighwayDense, (None, 64), 64),
        (lambda **kw: HighwayConv2D(3, **kw), (None, 6, 6, 16), 9 * 16),
    ],
)
def test_each_slice_is_initialised_with_a_single_branch_fan(make_layer, input_shape, fan_out):
    keras.utils.set_random_seed(1)
    init = keras.initializers.VarianceScaling(1.0, "fan_out", "untruncated_normal")
    layer = make_layer(variant="full", kernel_initializer=init)
    layer.build(input_shape)
    for branch in np.split(layer.kernel.numpy(), 3, axis=-1):
        # A fused fan_out (3 branches) would give a std sqrt(3) times smaller.
        np.testing.assert_allclose(branch.std(), np.sqrt(1.0 / fan_out), rtol=0.1)


# Fused weights ------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_weights(variant):
    n = len(BRANCHES[variant])
    dense, conv = dense_layer(variant=variant), conv_layer(variant=variant)
    assert [(w.name, tuple(w.shape)) for w in dense.weights] == [
        ("kernel", (8, n * 8)),
        ("bias", (n * 8,)),
    ]
    assert [(w.name, tuple(w.shape)) for w in conv.weights] == [
        ("kernel", (3, 3, 8, n * 8)),
        ("bias", (n * 8,)),
    ]
    assert dense.count_params() == n * (8 * 8 + 8)
    assert conv.count_params() == n * (3 * 3 * 8 * 8 + 8)


def test_coupled_parameter_counts_match_the_paper():
    d, k, c = 8, 3, 8
    assert dense_layer().count_params() == 2 * (d**2 + d)
    assert conv_layer().count_params() == 2 * (k**2 * c**2 + c)


# The standard battery: shapes, serialisation, .keras round trip, mixed precision, training --------

FULL_ARGUMENTS = {
    "activation": "tanh",
    "variant": "full",
    "kernel_initializer": "he_normal",
    "bias_initializer": keras.initializers.Constant(0.1),
    "transform_kernel_initializer": "orthogonal",
    "transform_bias_initializer": -3,
    "carry_kernel_initializer": keras.initializers.RandomNormal(stddev=0.1, seed=4),
    "carry_bias_initializer": 1.5,
    "kernel_regularizer": keras.regularizers.L2(1e-4),
    "bias_regularizer": keras.regularizers.L1(1e-5),
    "activity_regularizer": keras.regularizers.L2(1e-6),
    "kernel_constraint": keras.constraints.MaxNorm(3.0),
    "bias_constraint": keras.constraints.MaxNorm(10.0, axis=0),
}

def _bn_weights(branches, c_in, filters, kernel=3, projection=False):
    """BNHighwayBlock's weights with one convolution per stack, trainable ones first (Keras's
    order): (names, shapes)."""
    units = [(f"{b}1", kernel, c_in) for b in branches] + ([("shortcut", 1, c_in)]
                                                          if projection else [])
    trainable = [(f"{p}_{w}", shape) for p, k, c in units
                 for w, shape in (("kernel", (k, k, c, filters)), ("gamma", (filters,)),
                                  ("beta", (filters,)))]
    moving = [(f"{p}_moving_{w}", (filters,)) for p, _, _ in units for w in ("mean", "variance")]
    names, shapes = zip(*trainable, *moving)
    return list(names), list(shapes)


BN_IDENTITY = _bn_weights("ht", 4, 4)
BN_PROJECTION = _bn_weights("ht", 3, 6, projection=True)
SEQUENCE = (3, 5, 6)  # (batch, steps, features) of the masking check, for rank-2 cases

CHARS = 9  # character ids of the CharCNNEmbedder case (character_ids' default): 1..8, 0 pads


# The battery on every public layer of layers/__init__.py (test below). name: keyword arguments
# of run_layer_battery, less tmp_path. masking=False where Keras's counterpart does not
# support masking either (Conv2D), as each layer's docstring says.
BATTERY = {
    "dense_coupled": dict(make_layer=lambda: HighwayDense(), input_shape=(4, 6),
                          expected_weight_shapes=[(6, 12), (12,)], masking_input_shape=SEQUENCE),
    "dense_full_all_arguments": dict(
        make_layer=lambda: HighwayDense(**FULL_ARGUMENTS), input_shape=(4, 6),
        expected_weight_shapes=[(6, 18), (18,)], masking_input_shape=SEQUENCE),
    "dense_residual_rank3": dict(make_layer=lambda: HighwayDense(variant="residual"),
                                 input_shape=(4, 3, 6), expected_weight_shapes=[(6, 6), (6,)]),
    "stack_coupled_tanh": dict(  # each backend's fast path; TensorFlow's: a loop, then 1 layer
        make_layer=lambda: HighwayStack(5, unroll=2), input_shape=(3, 4, 6),
        expected_weight_shapes=[(5, 6, 12), (5, 12)]),
    "stack_full_elu": dict(  # autodiff through each backend's loop
        make_layer=lambda: HighwayStack(2, activation="elu", variant="full"),
        input_shape=(4, 6), expected_weight_shapes=[(2, 6, 18), (2, 18)],
        masking_input_shape=SEQUENCE),
    "conv_coupled": dict(
        make_layer=lambda: HighwayConv2D(3, filters=4, data_format="channels_last"),
        input_shape=(2, 5, 5, 4), expected_weight_shapes=[(3, 3, 4, 8), (8,)], masking=False),
    "conv_full_channels_first": dict(
        make_layer=lambda: HighwayConv2D(3, data_format="channels_first", **FULL_ARGUMENTS),
        input_shape=(2, 4, 5, 5), expected_weight_shapes=[(3, 3, 4, 12), (12,)],
        mixed_precision=False,  # TensorFlow's CPU Conv2D has no float16 NCHW kernel
        masking=False,
        # TensorFlow's own CPU kernels have no NCHW Conv2D (nor has keras.layers.Conv2D): XLA
        call=channels_first_call, jit_compile=True),
    "conv_c_only": dict(make_layer=lambda: HighwayConv2D((1, 3), variant="c_only"),
                        input_shape=(2, 4, 4, 3), expected_weight_shapes=[(1, 3, 3, 6), (6,)],
                        masking=False),
    "bn_block_identity": dict(
        make_layer=lambda: BNHighwayBlock(4, kernel_sizes=(3,)), input_shape=(2, 5, 5, 4),
        expected_weight_shapes=BN_IDENTITY[1], expected_weight_names=BN_IDENTITY[0],
        masking=False),
    "bn_block_projection": dict(
        make_layer=lambda: BNHighwayBlock(6, kernel_sizes=(3,), strides=2),
        input_shape=(2, 5, 5, 3), expected_output_shape=(2, 3, 3, 6),
        expected_weight_shapes=BN_PROJECTION[1], expected_weight_names=BN_PROJECTION[0],
        masking=False),
    "gcn": dict(make_layer=lambda: GlobalContrastNormalization(epsilon=1e-6),
                input_shape=(3, 4, 4, 3), expected_weight_shapes=[],
                masking_input_shape=SEQUENCE),
    "char_cnn_embedder": dict(  # over character ids; it masks padding words itself
        make_layer=lambda: CharCNNEmbedder(char_vocab_size=CHARS, char_embedding_dim=3,
                                           filters=(2, 3), kernel_sizes=(1, 2),
                                           highway_layers=1),
        input_shape=(3, 5, 4), make_input=character_ids, expected_output_shape=(3, 5, 5),
        expected_weight_shapes=[(CHARS, 3), (1, 3, 2), (2,), (2, 3, 3), (3,), (5, 10), (10,)],
        expected_weight_names=["embeddings", "kernel", "bias", "kernel", "bias", "kernel",
                               "bias"],
        mask_fronts=(None, "masking")),
    "caffe_preprocessing": dict(make_layer=CaffeImageNetPreprocessing, input_shape=(2, 4, 4, 3),
                                expected_weight_shapes=[], masking_input_shape=(3, 5, 3)),
}


@pytest.mark.parametrize("case", BATTERY)
def test_standard_battery(case, tmp_path):
    run_layer_battery(tmp_path=tmp_path, **BATTERY[case])


def test_the_battery_covers_every_public_layer():
    # A layer exported from layers/ without a battery case fails here until it gets one.
    public = {name for name in layers.__all__
              if isinstance(getattr(layers, name), type)
              and issubclass(getattr(layers, name), keras.layers.Layer)}
    covered = {type(case["make_layer"]()).__name__ for case in BATTERY.values()}
    assert public - covered == set(), "public layers without a battery case"


def test_config_keeps_the_users_initializers():
    config = HighwayDense(transform_bias_initializer=-1).get_config()
    assert config["transform_kernel_initializer"] is None
    assert config["carry_kernel_initializer"] is None
    assert config["transform_bias_initializer"]["config"]["value"] == -1.0
    rebuilt = HighwayDense.from_config(config)
    assert rebuilt.transform_kernel_initializer is None
    assert rebuilt.transform_bias_initializer.value == -1.0


# Bad arguments and inputs -------------------------------------------------------------------------


@pytest.mark.parametrize("make_layer", [HighwayDense, lambda **kw: HighwayConv2D(3, **kw)])
def test_unknown_variant(make_layer):
    with pytest.raises(ValueError, match=r"Expected one of \('coupled', 'full'.*variant='highway'"):
        make_layer(variant="highway")


@pytest.mark.parametrize("strides", [2, (1, 2), (2, 2)])
def test_conv_rejects_strides(strides):
    with pytest.raises(ValueError, match=r"strides=1.*spatial size.*pooling.*Received: strides"):
        HighwayConv2D(3, strides=strides)


@pytest.mark.parametrize("filters", [0, -3, 2.5])
def test_conv_rejects_filters_that_are_not_a_positive_integer(filters):
    with pytest.raises(ValueError, match=r"^`filters` must be None or a positive integer equal "
                                         r"to the number of input channels.*Received: filters="):
        HighwayConv2D(3, filters=filters)


def test_conv_rejects_valid_padding():
    with pytest.raises(ValueError, match=r"padding='same'.*Received: padding='valid'"):
        HighwayConv2D(3, padding="valid")


def test_conv_rejects_filters_that_change_the_width():
    layer = HighwayConv2D(3, filters=16)
    with pytest.raises(ValueError, match=r"filters=16 but its input has 8 channels.*plain Conv2D"):
        layer(np.zeros((1, 5, 5, 8), "float32"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"kernel_size": 0}, r"kernel_size=0"),
        ({"kernel_size": (3, 3, 3)}, r"kernel_size=\(3, 3, 3\)"),
        ({"kernel_size": 3.0}, r"kernel_size=3.0"),
        ({"kernel_size": 3, "filters": -1}, r"filters=-1"),
        ({"kernel_size": 3, "data_format": "NHWC"}, r"data_format='NHWC'"),
    ],
)
def test_conv_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HighwayConv2D(**kwargs)


def test_undefined_channel_axis():
    with pytest.raises(ValueError, match=r"defined channel axis.*input_shape=\(None, None\)"):
        HighwayDense().build((None, None))
    with pytest.raises(ValueError, match=r"defined channel axis"):
        HighwayDense()(keras.Input(shape=(None,)))
    with pytest.raises(ValueError, match=r"defined channel axis"):
        HighwayConv2D(3)(keras.Input(shape=(5, 5, None)))


def test_input_spec_fixes_the_width_after_build():
    layer = dense_layer()
    with pytest.raises(ValueError, match=r"expected axis -1 of input shape to have value 8"):
        layer(np.zeros((2, 4), "float32"))


def test_gate_bias_needs_a_built_layer():
    with pytest.raises(ValueError, match=r"call it on an input"):
        HighwayDense().transform_bias  # noqa: B018


# Global contrast normalisation --------------------------------------------------------------------


def test_gcn_matches_numpy():
    x = np.random.default_rng(10).uniform(0, 255, size=(4, 6, 6, 3)).astype("float32")
    y = keras.ops.convert_to_numpy(GlobalContrastNormalization()(x))
    flat = x.reshape(4, -1).astype("float64")
    expected = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-8)
    np.testing.assert_allclose(y.reshape(4, -1), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y.reshape(4, -1).mean(1), 0, atol=1e-5)
    np.testing.assert_allclose(y.reshape(4, -1).std(1), 1, rtol=1e-4)


def test_gcn_keeps_float64_statistics_in_a_float64_layer():
    """Statistics in the layer's own dtype (float32 only for float16 and bfloat16): in
    float64 the result agrees with NumPy to float64 round-off."""
    x = np.random.default_rng(11).uniform(0, 255, size=(2, 5, 5, 3))
    y = keras.ops.convert_to_numpy(GlobalContrastNormalization(dtype="float64")(x))
    flat = x.reshape(2, -1)
    expected = (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True) + 1e-8)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.reshape(2, -1), expected, rtol=1e-12, atol=1e-12)


def test_gcn_constant_image_gives_zeros():
    x = np.stack([np.full((4, 4, 3), 200, "uint8"), np.zeros((4, 4, 3), "uint8")])
    y = keras.ops.convert_to_numpy(GlobalContrastNormalization()(x))
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, np.zeros_like(y))


def test_gcn_scale_is_the_standard_deviation_each_example_ends_with():
    x = np.random.default_rng(12).uniform(0, 255, size=(3, 5, 5, 3)).astype("float32")
    layer = GlobalContrastNormalization(scale=0.7)
    y = keras.ops.convert_to_numpy(layer(x)).reshape(3, -1)
    flat = x.reshape(3, -1).astype("float64")
    expected = 0.7 * (flat - flat.mean(1, keepdims=True)) / np.sqrt(flat.var(1, keepdims=True)
                                                                    + 1e-8)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y.std(1), 0.7, rtol=1e-4)
    assert GlobalContrastNormalization.from_config(layer.get_config()).scale == 0.7
    with pytest.raises(ValueError, match=r"`scale` must be a positive number.*scale=0"):
        GlobalContrastNormalization(scale=0)


def test_a_cifar_nets_gcn_scale_sets_its_inputs_standard_deviation():
    import zoo

    model = zoo.load("highway_cifar10", gcn_scale=0.7)
    x = np.random.default_rng(13).uniform(0, 255, size=(2, 32, 32, 3)).astype("float32")
    gcn = keras.Model(model.input, model.get_layer("gcn").output)
    out = keras.ops.convert_to_numpy(gcn(x)).reshape(2, -1)
    np.testing.assert_allclose(out.std(1), 0.7, rtol=1e-4)
    default = keras.Model(*(lambda m: (m.input, m.get_layer("gcn").output))(
        zoo.load("highway_cifar10")))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(default(x)).reshape(2, -1),
                               out / 0.7, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("epsilon", [0, -1.0, "small"])
def test_gcn_rejects_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match=r"positive number.*Received: epsilon="):
        GlobalContrastNormalization(epsilon=epsilon)
