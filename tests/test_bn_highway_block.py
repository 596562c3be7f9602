"""Tests of layers.BNHighwayBlock: against a NumPy reference (inference and training mode),
serialisation, a training step, mixed precision, lesioning, bad arguments, and the gate
analyses, export and TensorBoard summaries on nets built from it."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_test_helper import channels_first_call

import zoo
from layers import VARIANTS, BNHighwayBlock
from training.callbacks import GateSummaries
from zoo.analysis import gate_statistics, highway_layers, lesion_errors, lesioned, stages
from zoo.analysis.gates import GateProbe, per_unit


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def relu(z):
    return np.maximum(z, 0.0)


def conv(x, kernel, strides):
    """TensorFlow's 'same' zero-padded strided cross-correlation; x NHWC, kernel (kh, kw, c, o)."""
    kh, kw = kernel.shape[:2]
    (sh, sw), (rows, cols) = strides, x.shape[1:3]
    out_rows, out_cols = -(-rows // sh), -(-cols // sw)
    pad_r = max((out_rows - 1) * sh + kh - rows, 0)
    pad_c = max((out_cols - 1) * sw + kw - cols, 0)
    padded = np.pad(x, ((0, 0), (pad_r // 2, pad_r - pad_r // 2),
                        (pad_c // 2, pad_c - pad_c // 2), (0, 0)))
    out = np.zeros((len(x), out_rows, out_cols, kernel.shape[-1]))
    for i in range(kh):
        for j in range(kw):
            out += padded[:, i : i + (out_rows - 1) * sh + 1 : sh,
                          j : j + (out_cols - 1) * sw + 1 : sw, :] @ kernel[i, j]
    return out


def reference(config, weights, x, training=False):
    """y, H, T, C and S of a block with `config` and `weights` ({variable name: array}),
    written from the formula: per stack Conv-BN(-ReLU-Conv-BN ...), BN with the moving
    statistics (or, in training, the batch's), and the batch statistics used."""
    learned = {"coupled": "ht", "full": "htc", "c_only": "hc", "t_only": "ht",
               "residual": "h", "plain": "h"}[config["variant"]]
    strides, eps = config["strides"], config["epsilon"]
    batch_stats = {}

    def conv_bn(z, prefix, stride):
        z = conv(z, weights[f"{prefix}_kernel"], stride)
        if f"{prefix}_bias" in weights:
            z = z + weights[f"{prefix}_bias"]
        if training:
            mean, var = z.mean(axis=(0, 1, 2)), z.var(axis=(0, 1, 2))
            batch_stats[prefix] = (mean, var)
        else:
            mean, var = weights[f"{prefix}_moving_mean"], weights[f"{prefix}_moving_variance"]
        return (z - mean) / np.sqrt(var + eps) * weights[f"{prefix}_gamma"] + weights[
            f"{prefix}_beta"]

    def stack(branch):
        z, n = x, len(config["kernel_sizes"])
        for i in range(n):
            z = conv_bn(z, f"{branch}{i + 1}", strides if i == 0 else (1, 1))
            if i < n - 1:
                z = relu(z)
        return z

    activation = {None: lambda z: z, "relu": relu}
    h = activation[config["activation"]](stack("h"))
    ones = np.ones_like(h)
    t = sigmoid(stack("t")) if "t" in learned else ones
    if config["variant"] == "coupled":
        c = 1 - t
    elif config["variant"] == "plain":
        c = np.zeros_like(h)
    else:
        c = sigmoid(stack("c")) if "c" in learned else ones
    if "shortcut_kernel" in weights:
        s = conv_bn(x, "shortcut", strides)
    elif x.shape[1:] != h.shape[1:]:  # zero padding: every strides-th pixel, zero channels
        extra = h.shape[-1] - x.shape[-1]
        s = np.pad(x[:, :: strides[0], :: strides[1]],
                   ((0, 0), (0, 0), (0, 0), (extra // 2, extra - extra // 2)))
    else:
        s = x
    y = activation[config["output_activation"]](h * t + s * c)
    return {"y": y, "h": h, "t": t, "c": c, "s": s}, batch_stats


CASES = {
    # the BN CIFAR block: two 3x3 convs, H ending in a ReLU
    "basic_identity": dict(filters=6, kernel_sizes=(3, 3), strides=1, channels=6,
                           activation="relu", output_activation=None),
    "basic_projection": dict(filters=6, kernel_sizes=(3, 3), strides=2, channels=4,
                             activation="relu", output_activation=None),
    # Greff et al.'s ImageNet bottleneck: "Highway" (no ReLU ending H) and "Highway-Full"
    "bottleneck_highway": dict(filters=8, kernel_sizes=(1, 3, 1), inner_filters=3, strides=2,
                               channels=5, activation=None, output_activation="relu",
                               use_bias=True),
    "bottleneck_full": dict(filters=8, kernel_sizes=(1, 3, 1), inner_filters=3, strides=1,
                            channels=8, activation="relu", output_activation="relu",
                            use_bias=True),
    "forced_projection": dict(filters=6, kernel_sizes=(3, 1), strides=1, channels=6,
                              shortcut="projection", activation="relu",
                              output_activation=None),
    "zero_pad": dict(filters=8, kernel_sizes=(3, 3), strides=2, channels=4,
                     shortcut="zero_pad", activation="relu", output_activation=None),
}


def make_block(case, variant="coupled", **extra):
    args = {k: v for k, v in CASES[case].items() if k != "channels"}
    return BNHighwayBlock(variant=variant, epsilon=1e-3, momentum=0.9, **args, **extra)


def randomize(block, rng):
    """Every weight, the moving statistics included, set away from its initial value."""
    for w in block.weights:
        if w.name.endswith(("_gamma", "_moving_variance")):
            w.assign(rng.uniform(0.5, 2.0, size=w.shape))
        else:
            w.assign(rng.normal(scale=0.4, size=w.shape))


def inputs(case, batch=3, size=7, seed=1):
    shape = (batch, size, size, CASES[case]["channels"])
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def built(case, variant="coupled", seed=0, **extra):
    block = make_block(case, variant, **extra)
    x = inputs(case)
    block.build(x.shape)
    randomize(block, np.random.default_rng(seed))
    return block, x


def numpy_weights(block):
    return {w.name: keras.ops.convert_to_numpy(w).astype(np.float64) for w in block.weights}


def config_of(block):
    return {"variant": block.variant, "strides": block.strides, "epsilon": block.epsilon,
            "kernel_sizes": block.kernel_sizes,
            "activation": None if block.activation is keras.activations.linear else "relu",
            "output_activation": (None if block.output_activation is keras.activations.linear
                                  else "relu")}


def outputs(block, x):
    values = {"y": block(x, training=False), "h": block.block_state(x),
              "t": block.transform_gate(x), "c": block.carry_gate(x)}
    if block.variant != "plain":
        values["s"] = block.shortcut_output(x)
    return {k: keras.ops.convert_to_numpy(v) for k, v in values.items()}


def assert_close(actual, expected, keys):
    for key in keys:
        assert actual[key].shape == expected[key].shape, key
        np.testing.assert_allclose(actual[key], expected[key], rtol=1e-4, atol=1e-5,
                                   err_msg=key)


# --- against NumPy -------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(CASES))
def test_inference_matches_numpy(case):
    block, x = built(case)
    expected, _ = reference(config_of(block), numpy_weights(block), x)
    assert_close(outputs(block, x), expected, "yhtcs")


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_matches_numpy(variant):
    block, x = built("basic_projection", variant)
    expected, _ = reference(config_of(block), numpy_weights(block), x)
    keys = "yhtc" if variant == "plain" else "yhtcs"
    assert_close(outputs(block, x), expected, keys)
    names = {w.name[0] for w in block.weights if not w.name.startswith("shortcut")}
    assert names == set({"coupled": "ht", "full": "htc", "c_only": "hc", "t_only": "ht",
                         "residual": "h", "plain": "h"}[variant])
    assert (variant == "plain") == ("shortcut_kernel" not in {w.name for w in block.weights})
    if variant == "plain":  # y = H(x): no shortcut, so nothing to carry the input through
        with pytest.raises(ValueError, match="no shortcut"):
            block.shortcut_output(x)


@pytest.mark.parametrize("case", ["basic_projection", "bottleneck_highway"])
def test_training_mode_uses_and_records_the_batch_statistics(case):
    block, x = built(case)
    before = numpy_weights(block)
    expected, batch = reference(config_of(block), before, x, training=True)
    y = keras.ops.convert_to_numpy(block(x, training=True))
    np.testing.assert_allclose(y, expected["y"], rtol=1e-4, atol=1e-4)
    after = numpy_weights(block)
    assert set(batch) == {n.removesuffix("_moving_mean") for n in after
                          if n.endswith("_moving_mean")}
    for prefix, (mean, var) in batch.items():  # moving = moving * 0.9 + batch * 0.1
        for stat, value in (("mean", mean), ("variance", var)):
            name = f"{prefix}_moving_{stat}"
            np.testing.assert_allclose(after[name], 0.9 * before[name] + 0.1 * value,
                                       rtol=1e-4, atol=1e-5, err_msg=name)


def test_channels_first_computes_what_channels_last_does():
    block, x = built("bottleneck_highway")
    first = make_block("bottleneck_highway", data_format="channels_first")
    x_first = np.transpose(x, (0, 3, 1, 2))
    first.build(x_first.shape)
    first.set_weights(block.get_weights())
    y = keras.ops.convert_to_numpy(channels_first_call(first)(x_first, training=False))
    expected = keras.ops.convert_to_numpy(block(x, training=False))
    np.testing.assert_allclose(np.transpose(y, (0, 2, 3, 1)), expected, rtol=1e-5, atol=1e-5)
    assert tuple(first.compute_output_shape(x_first.shape)) == y.shape == (3, 8, 4, 4)


# --- initialisation, gate biases, shapes -----------------------------------------------------


def test_gate_biases_are_the_last_gate_bns_beta():
    block = BNHighwayBlock(6, variant="full", transform_bias_initializer=-6.0,
                           carry_bias_initializer=3.0)
    block(np.zeros((1, 5, 5, 4), "float32"))
    weights = numpy_weights(block)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(block.transform_bias), -6.0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(block.carry_bias), 3.0)
    assert block.transform_bias is next(w for w in block.weights if w.name == "t2_beta")
    for name in ("h1_beta", "h2_beta", "t1_beta", "c1_beta", "shortcut_beta"):
        np.testing.assert_array_equal(weights[name], 0.0)
    residual = BNHighwayBlock(4, variant="residual")
    residual(np.zeros((1, 5, 5, 4), "float32"))
    assert residual.transform_bias is None and residual.carry_bias is None
    with pytest.raises(ValueError, match="call it on an input"):
        _ = BNHighwayBlock(4).transform_bias


def test_fresh_gates_start_near_their_bias_and_every_conv_differs():
    keras.utils.set_random_seed(0)
    block = BNHighwayBlock(8, transform_bias_initializer=-3.0)
    x = np.random.default_rng(0).normal(size=(16, 6, 6, 8)).astype("float32")
    block(x, training=True)  # batch statistics: the gate's pre-activation has mean b_T
    t_logit = np.log(keras.ops.convert_to_numpy(block.transform_gate(x)))
    assert abs(float(np.mean(t_logit)) + 3.0) < 0.5
    kernels = [keras.ops.convert_to_numpy(w) for w in block.weights if w.name.endswith("kernel")]
    for i, a in enumerate(kernels):
        assert not any(a.shape == b.shape and np.array_equal(a, b) for b in kernels[i + 1:])


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_output_shape_and_parameter_count(data_format):
    block = BNHighwayBlock(12, kernel_sizes=(1, 3, 1), inner_filters=3, strides=2,
                           use_bias=True, data_format=data_format)
    shape = (None, 9, 5, 4) if data_format == "channels_last" else (None, 4, 9, 5)
    y = block(keras.Input(shape[1:]))
    assert tuple(y.shape) == block.compute_output_shape(shape)
    assert tuple(y.shape) == ((None, 5, 3, 12) if data_format == "channels_last"
                              else (None, 12, 5, 3))
    stack = (4 * 3 + 3) + (9 * 3 * 3 + 3) + (3 * 12 + 12) + 4 * (3 + 3 + 12)  # convs + BNs
    assert block.count_params() == 2 * stack + (4 * 12 + 12) + 4 * 12  # H, T, projection


# --- serialisation, training, mixed precision ------------------------------------------------


@pytest.mark.parametrize("case", ["bottleneck_highway", "zero_pad"])
def test_config_and_keras_file_round_trip(case, tmp_path):
    block, x = built(case, variant="full", kernel_initializer="he_normal",
                     transform_bias_initializer=-1.5, kernel_regularizer="l2", name="block")
    config = block.get_config()
    clone = BNHighwayBlock.from_config(config)
    assert clone.get_config() == config
    clone.build(x.shape)
    clone.set_weights(block.get_weights())
    y = keras.ops.convert_to_numpy(block(x, training=False))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(clone(x, training=False)), y)

    inputs_ = keras.Input(x.shape[1:])
    model = keras.Model(inputs_, block(inputs_))
    model.save(tmp_path / "block.keras")
    loaded = keras.saving.load_model(tmp_path / "block.keras")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x, training=False)), y)
    assert loaded.get_layer("block").get_config() == config
    assert config["kernel_sizes"] == tuple((k, k) for k in CASES[case]["kernel_sizes"])


def test_an_unknown_data_format_is_refused_naming_the_ones_there():
    with pytest.raises(ValueError, match=r"^`data_format` must be 'channels_last', "
                                         r"'channels_first' or None\. Received: "
                                         r"data_format='NCHW'$"):
        BNHighwayBlock(4, data_format="NCHW")


def test_a_training_step_changes_every_trainable_weight_and_the_moving_statistics():
    block, x = built("basic_projection")
    inputs_ = keras.Input(x.shape[1:])
    head = keras.layers.Dense(1)(keras.layers.Flatten()(block(inputs_)))
    model = keras.Model(inputs_, head)
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse", jit_compile=False)
    before = [keras.ops.convert_to_numpy(w).copy() for w in block.weights]
    history = model.fit(x, np.ones((len(x), 1), "float32"), epochs=1, batch_size=len(x),
                        verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    for old, w in zip(before, block.weights):
        assert not np.array_equal(old, keras.ops.convert_to_numpy(w)), w.name


def test_mixed_precision_gives_float16_close_to_float32():
    block, x = built("bottleneck_highway")
    mixed = BNHighwayBlock.from_config({**block.get_config(), "dtype": "mixed_float16"})
    mixed.build(x.shape)
    mixed.set_weights(block.get_weights())
    y16 = mixed(x, training=False)
    assert keras.backend.standardize_dtype(y16.dtype) == "float16"
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in mixed.weights)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(y16),
                               keras.ops.convert_to_numpy(block(x, training=False)),
                               rtol=2e-2, atol=2e-2)


# --- lesioning ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["basic_identity", "basic_projection", "bottleneck_highway"])
def test_a_lesioned_block_carries_its_input_through_the_shortcut(case):
    block, x = built(case)
    expected = keras.ops.convert_to_numpy(block.shortcut_output(x))
    if CASES[case]["output_activation"] == "relu":
        expected = np.maximum(expected, 0)
    with lesioned(block):
        y = keras.ops.convert_to_numpy(block(x, training=False))
    if case == "basic_identity":
        np.testing.assert_array_equal(y, x)  # bit for bit
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)
    assert not block.lesioned


# --- bad arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(filters=0), "filters"),
    (dict(filters=4, inner_filters=2.5), "inner_filters"),
    (dict(filters=4, kernel_sizes=3), "kernel_sizes"),
    (dict(filters=4, kernel_sizes=()), "kernel_sizes"),
    (dict(filters=4, kernel_sizes=(3, 0)), "kernel_sizes"),
    (dict(filters=4, strides=(2, 2, 2)), "strides"),
    (dict(filters=4, shortcut="pad"), "shortcut"),
    (dict(filters=4, variant="gated"), "variant"),
    (dict(filters=4, data_format="nhwc"), "data_format"),
    (dict(filters=4, momentum=1.0), "momentum"),
    (dict(filters=4, epsilon=0.0), "epsilon"),
])
def test_bad_arguments_are_refused_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=f"Received: {message}="):
        BNHighwayBlock(**kwargs)


def test_a_zero_pad_shortcut_cannot_drop_channels():
    with pytest.raises(ValueError, match="cannot drop any: 8 input channels, filters=4"):
        BNHighwayBlock(4, strides=2, shortcut="zero_pad")(np.zeros((1, 4, 4, 8), "float32"))


# --- the analyses on nets built from the block ---------------------------------------------


@pytest.fixture(scope="module")
def bn_cifar():
    keras.utils.set_random_seed(0)
    model = zoo.load("highway110_bn_cifar10", blocks_per_stage=2)
    for block in highway_layers(model):
        randomize(block, np.random.default_rng(len(block.name)))
        block.transform_bias.assign(np.full(block.filters, -1.0))
    return model


def pixels(n=6, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (n, 32, 32, 3)).astype("float32")


def test_gate_analyses_see_every_block_of_a_bn_net(bn_cifar):
    names = [f"stage{s}_block{b}" for s in (1, 2, 3) for b in (1, 2)]
    assert [layer.name for layer in highway_layers(bn_cifar)] == names
    assert [(stage, [layer.name for layer in chain]) for stage, chain in stages(bn_cifar)] == [
        (f"stage{s}", [f"stage{s}_block1", f"stage{s}_block2"]) for s in (1, 2, 3)]
    x, labels = pixels(), np.arange(6) % 3
    stats = gate_statistics(bn_cifar, x, labels, batch_size=4)
    assert stats.layers == names and stats.units == [14, 14, 28, 28, 56, 56]
    assert all(stats.convolutional)
    io = GateProbe(bn_cifar)(x, numpy=True)
    for i, layer in enumerate(highway_layers(bn_cifar)):
        t = keras.ops.convert_to_numpy(layer.transform_gate(io[layer.name][0]))
        assert t.shape == io[layer.name][1].shape  # T has the block's output shape
        np.testing.assert_allclose(stats.mean_t[i, : layer.filters],
                                   per_unit(t).mean(axis=0), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(stats.transform_bias[i, : layer.filters], -1.0)
    assert [e["stage"] for e in stats.estimation] == ["stage1", "stage2", "stage3"]
    assert all(e["mean"][-1] == 0.0 and e["std"][-1] == 0.0 for e in stats.estimation)
    lesion = lesion_errors(bn_cifar, x, labels)
    assert lesion["layers"] == names and len(lesion["errors"]) == 6


def test_the_export_gates_signature_of_a_bn_net(bn_cifar, tmp_path):
    x = pixels(4, seed=1)
    path = zoo.export(bn_cifar, base_dir=tmp_path, name="bn", warmup=False)
    gates = tf.saved_model.load(str(path)).signatures["gates"](pixels=tf.constant(x))
    io = GateProbe(bn_cifar)(x, numpy=True)
    expected = {layer.name: keras.ops.convert_to_numpy(layer.transform_gate(
        io[layer.name][0])).reshape(len(x), -1).mean(axis=1)
        for layer in highway_layers(bn_cifar)}
    assert sorted(gates) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(gates[name].numpy(), value, rtol=1e-5, atol=1e-6)


def test_gate_summaries_record_the_blocks_of_a_small_bn_model(tmp_path):
    keras.utils.set_random_seed(0)
    inputs_ = keras.Input((8, 8, 3))
    x = BNHighwayBlock(4, name="stage1_block1")(inputs_)
    x = BNHighwayBlock(4, name="stage1_block2")(x)
    x = BNHighwayBlock(6, strides=2, name="stage2_block1")(x)
    outputs_ = keras.layers.Dense(3, activation="softmax", name="logits")(
        keras.layers.GlobalAveragePooling2D()(x))
    model = keras.Model(inputs_, outputs_)
    assert [(stage, [layer.name for layer in chain]) for stage, chain in stages(model)] == [
        ("stage1", ["stage1_block1", "stage1_block2"]), ("stage2", ["stage2_block1"])]
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    images = np.random.default_rng(0).normal(size=(8, 8, 8, 3)).astype("float32")
    labels = np.arange(8) % 3
    callback = GateSummaries(tmp_path / "tensorboard", (images, labels), examples=8)
    model.fit(images, labels, epochs=1, batch_size=4, verbose=0, callbacks=[callback])
    history = json.loads((tmp_path / "gates.json").read_text())
    assert history["layers"] == ["stage1_block1", "stage1_block2", "stage2_block1"]
    assert history["units"] == [4, 4, 6]
    assert [e["epoch"] for e in history["epochs"]] == [0, 1]
    assert history["epochs"][0]["transform_bias_mean"] == [-2.0, -2.0, -2.0]


def test_gate_analyses_see_the_imagenet_highway_blocks():
    model = zoo.load("highway_full50_imagenet", input_shape=(32, 32, 3), width_multiplier=0.125,
                     stage_blocks=(2, 1, 1, 1))
    names = ["conv2_block1", "conv2_block2", "conv3_block1", "conv4_block1", "conv5_block1"]
    assert [layer.name for layer in highway_layers(model)] == names
    assert [stage for stage, _ in stages(model)] == ["conv2", "conv3", "conv4", "conv5"]
    stats = gate_statistics(model, pixels(2), num_classes=1000)
    assert stats.units == [32, 32, 64, 128, 256]
    np.testing.assert_array_equal(stats.transform_bias[np.isfinite(stats.transform_bias)], -1.0)
