"""Mixed precision (`keras.mixed_precision.set_dtype_policy`): every layer, the stack's fast path
included, and a zoo model of every family train a step and predict float32 probabilities;
`zoo.load(name, dtype=...)` and a run's `--dtype` set it for one model."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from zoo_cases import one_per_family

import zoo
from layers import GlobalContrastNormalization, HighwayConv2D, HighwayDense, HighwayStack

POLICIES = ["mixed_float16", "mixed_bfloat16"]
ROUND_OFF = 1e-6  # rows of a float32 softmax sum to 1 within a few float32 ulps


@pytest.fixture(params=POLICIES)
def policy(request):
    """The global dtype policy set for the test, and float32 again after it, pass or fail."""
    keras.mixed_precision.set_dtype_policy(request.param)
    try:
        yield keras.mixed_precision.dtype_policy()
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


def _assert_probabilities(p, n, classes):
    p = np.asarray(p)
    assert p.dtype == np.float32 and p.shape == (n, classes)
    assert np.all(np.isfinite(p)) and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=ROUND_OFF)


def _train_one_step(model, x, y):
    """One Adam step: the loss is finite and every trainable weight moved."""
    model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy")
    before = [np.array(w) for w in model.trainable_weights]
    loss = model.train_on_batch(x, y)
    assert np.isfinite(loss)
    for old, weight in zip(before, model.trainable_weights):
        assert weight.dtype == "float32"  # the variables stay float32
        assert not np.array_equal(old, np.asarray(weight)), weight.path


LAYERS = {
    "highway_dense": (lambda: HighwayDense(activation="tanh", variant="full"), (6,)),
    "highway_conv2d": (lambda: HighwayConv2D(3), (5, 5, 4)),
    "highway_stack": (lambda: HighwayStack(5, activation="relu", unroll=2), (6,)),
    "gcn": (lambda: GlobalContrastNormalization(), (4, 4, 3)),
}


@pytest.mark.parametrize("case", LAYERS)
def test_every_layer_trains_and_predicts_under_mixed_precision(case, policy):
    make_layer, shape = LAYERS[case]
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 255 if case == "gcn" else 1, (8, *shape)).astype("float32")
    y = rng.integers(0, 3, 8)
    layer = make_layer()
    inputs = keras.Input(shape)
    h = keras.layers.Dense(4)(inputs) if case == "gcn" else inputs  # something to train
    h = keras.layers.Flatten()(layer(h))
    logits = keras.layers.Dense(3, dtype="float32")(h)
    model = keras.Model(inputs, keras.layers.Activation("softmax", dtype="float32")(logits))
    assert layer.compute_dtype == policy.compute_dtype
    out = layer(x)
    assert keras.backend.standardize_dtype(out.dtype) == policy.compute_dtype
    _train_one_step(model, x, y)
    _assert_probabilities(model.predict(x, verbose=0), 8, 3)
    if case == "highway_stack":
        # Training ran the fast path: its custom (hand-written) gradient, in the policy's dtype.
        @tf.function
        def grads(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = layer(x, training=True)
            return tape.gradient(y, [x, layer.kernel])

        spec = tf.TensorSpec((None, *shape), policy.compute_dtype)
        graph = grads.get_concrete_function(spec).graph
        assert any("_gradient_op_type" in op.node_def.attr for op in graph.get_operations())
        gx, g_kernel = grads(tf.cast(x, policy.compute_dtype))
        assert gx.dtype == policy.compute_dtype and g_kernel.dtype == "float32"
        assert np.all(np.isfinite(np.asarray(g_kernel)))


@pytest.mark.parametrize(
    "name, overrides", one_per_family(),
    ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={v}" for k, v in v.items()),
)
def test_a_zoo_model_of_every_family_trains_and_predicts_under_mixed_precision(
    name, overrides, policy
):
    keras.utils.set_random_seed(0)
    model = zoo.load(name, **overrides)
    shape = tuple(model.input_shape[1:])
    classes = model.output_shape[-1]
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 255, (8, *shape)).astype("float32")  # raw pixels, as every zoo model takes
    body = [layer for layer in model.layers if layer.weights and layer.name != "logits"]
    assert body and all(layer.compute_dtype == policy.compute_dtype for layer in body)
    for layer in ("logits", "predictions"):  # the output layers stay float32 (Keras's guide)
        assert model.get_layer(layer).compute_dtype == "float32"
    _train_one_step(model, x, rng.integers(0, classes, 8))
    _assert_probabilities(model.predict(x, verbose=0), 8, classes)


def test_load_with_dtype_builds_the_model_under_that_policy_and_leaves_the_global_one():
    """`zoo.load(name, dtype=...)`, keras-hub's argument: the body computes in bfloat16, the
    output layers and every variable stay float32, the global policy is untouched, the model's
    config and preset bring the policy back, and its weights give a float32 twin the same
    probabilities within bfloat16's rounding."""
    from layers import HighwayDense

    keras.utils.set_random_seed(0)
    model = zoo.load("highway_fc10_mnist", depth=4, dtype="mixed_bfloat16")
    assert keras.config.dtype_policy().name == "float32"
    highway = [layer for layer in model.layers if isinstance(layer, HighwayDense)]
    assert highway and all(layer.compute_dtype == "bfloat16" for layer in highway)
    assert model.get_layer("predictions").compute_dtype == "float32"
    assert {v.dtype for v in model.weights} == {"float32"}

    x = np.random.default_rng(0).uniform(0, 255, (16, 28, 28, 1)).astype("float32")
    twin = zoo.load("highway_fc10_mnist", depth=4)
    twin.set_weights(model.get_weights())
    p, q = model.predict(x, verbose=0), twin.predict(x, verbose=0)
    _assert_probabilities(p, 16, 10)
    assert 0 < np.abs(p - q).max() < 0.05  # bfloat16 keeps 8 bits of mantissa

    rebuilt = type(model).from_config(model.get_config())
    assert rebuilt.get_layer(highway[0].name).compute_dtype == "bfloat16"


def test_a_bad_dtype_is_refused_in_one_line():
    for bad in ("bf16", "int8_from_float32"):
        with pytest.raises(ValueError, match=r"dtype must name a Keras dtype policy.*"
                           rf"Received: dtype='{bad}'"):
            zoo.load("highway_fc10_mnist", depth=3, dtype=bad)
    assert keras.config.dtype_policy().name == "float32"


def test_a_run_trains_in_mixed_bfloat16_and_its_directory_reloads_either_way(tmp_path):
    """`train(..., dtype="mixed_bfloat16")` (`highway-zoo train --dtype`): the run learns,
    records the policy with its overrides, and its directory loads as it trained or, asked,
    as float32 from the same float32 weights."""
    from test_training import separable_digits

    from training.trainer import train

    run_dir = tmp_path / "run"
    metrics = train("highway_fc10_mnist", dataset=separable_digits(), depth=4, epochs=3,
                    out=run_dir, seed=3, verbose=0, dtype="mixed_bfloat16")
    assert metrics["test_accuracy"] > 0.8
    assert keras.config.dtype_policy().name == "float32"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["overrides"] == {"depth": 4, "dtype": "mixed_bfloat16"}
    as_trained = zoo.load(str(run_dir))
    as_float32 = zoo.load(str(run_dir), dtype="float32")
    assert as_trained.get_layer("predictions").compute_dtype == "float32"
    assert {layer.compute_dtype for layer in as_trained.layers if layer.weights} \
        == {"bfloat16", "float32"}
    assert {layer.compute_dtype for layer in as_float32.layers if layer.weights} == {"float32"}
    for a, b in zip(as_trained.get_weights(), as_float32.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)



def test_a_run_resumes_in_another_precision_and_each_epoch_names_its_own(tmp_path, capsys):
    """bfloat16 is faster than float32 on one CPU and slower on another: a run interrupted in
    one policy goes on in the other, which its history, resumptions and metrics record."""
    from test_training import separable_digits

    from training.trainer import precision_of, train

    class Interrupt(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 1:
                raise KeyboardInterrupt("the session ended")

    run_dir = tmp_path / "run"
    settings = dict(dataset=separable_digits(256, 64), depth=3, epochs=3, out=run_dir, seed=1,
                    verbose=0)
    with pytest.raises(KeyboardInterrupt):
        train("highway_fc10_mnist", callbacks=[Interrupt()], **settings)
    metrics = train("highway_fc10_mnist", dtype="mixed_bfloat16", **settings)
    assert "trained in float32 so far and continues in mixed_bfloat16" in capsys.readouterr().out
    history = json.loads((run_dir / "history.json").read_text())
    assert [e["precision"] for e in history] == ["float32", "mixed_bfloat16", "mixed_bfloat16"]
    assert metrics["precision"] == "float32 (epoch 1), mixed_bfloat16 (epochs 2-3)"
    run = json.loads((run_dir / "run.json").read_text())
    assert run["resumed"][-1]["precision"] == "mixed_bfloat16"
    assert run["overrides"] == {"depth": 3}  # as it started
    assert precision_of([{"epoch": 1}, {"epoch": 2}]) == "float32"  # recorded before
    assert zoo.pretrained.precision_name(metrics["precision"]) == "f32_mixed_bf16"
    assert zoo.pretrained.precision_name("mixed_bfloat16") == "mixed_bf16"


@pytest.mark.parametrize("dtype", POLICIES)
def test_gates_of_a_mixed_precision_net_come_out_float32(dtype):
    """`GateProbe(..., numpy=True)`, which the gate summaries and analyses read: float32 T
    under a mixed policy, as the float32 twin's within the policy's rounding. In float16 the
    std of 64 images' stage-1 T (800K values) overflowed to inf in gates.json."""
    from zoo.analysis.gates import GateProbe

    keras.utils.set_random_seed(0)
    model = zoo.load("highway_conv16_mnist", dtype=dtype)
    twin = zoo.load("highway_conv16_mnist")
    twin.set_weights(model.get_weights())
    x = np.random.default_rng(0).uniform(0, 255, (64, 28, 28, 1)).astype("float32")
    gates, reference = GateProbe(model).gates(x, numpy=True), GateProbe(twin).gates(x, numpy=True)
    assert gates.keys() == reference.keys()
    for name, t in gates.items():
        assert t.dtype == np.float32 and np.isfinite(np.std(t)), name
        np.testing.assert_allclose(t, reference[name], atol=0.05)
        assert np.std(t) == pytest.approx(np.std(reference[name]), rel=0.05)
