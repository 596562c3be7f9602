"""Keras 3 on every backend: JAX and PyTorch as first-class as TensorFlow.

The pytest process runs on TensorFlow (conftest.py); JAX and PyTorch run in subprocesses, with
KERAS_BACKEND set before keras is imported, through `run_on_backend`. Weights cross over as
`.weights.h5` files (backend-neutral): saved on TensorFlow, loaded on the others, so every
backend computes with the same weights. The builders and `output_and_gradients` below are
backend-neutral and imported by the subprocesses (this module imports no framework itself).

All tests here are marked `backends` (pytest.ini): `pytest -m backends`, or `-m "not
backends"` to leave them out.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
OTHER_BACKENDS = ("jax", "torch")

pytestmark = pytest.mark.backends


def run_on_backend(backend, code, tmp_path, timeout=240, **arrays):
    """Runs `code` (Python source) in a fresh process on `backend` and returns what it left in
    `OUT`, as a dict of NumPy arrays.

    The code sees `IN` (the keyword `arrays`, as NumPy arrays), `OUT` (a dict to fill with
    arrays, or anything `np.asarray` takes), `TMP` (`tmp_path`) and `BACKEND`; the repository
    root and tests/ are on sys.path, so `import test_backends` gives this module's helpers.
    """
    tag = f"{backend}_{abs(hash(code)) % 10**8}"
    inputs, outputs = tmp_path / f"in_{tag}.npz", tmp_path / f"out_{tag}.npz"
    np.savez(inputs, **arrays)
    script = tmp_path / f"run_{tag}.py"
    script.write_text(
        "import sys\n"
        f"sys.path[:0] = [{str(ROOT)!r}, {str(TESTS)!r}]\n"
        "from pathlib import Path\n"
        "import numpy as np\n"
        f"IN = dict(np.load({str(inputs)!r}))\n"
        f"OUT, TMP, BACKEND = {{}}, Path({str(tmp_path)!r}), {backend!r}\n"
        + textwrap.dedent(code)
        + f"\nnp.savez({str(outputs)!r}, **{{k: np.asarray(v) for k, v in OUT.items()}})\n"
    )
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=timeout, cwd=str(ROOT))
    assert run.returncode == 0, f"{backend}:\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    with np.load(outputs) as out:
        return dict(out)


def output_and_gradients(model, x, training=False, jit=True):
    """`model(x)` and the gradients of `sum(sin(model(x)))` for `x` and each of
    `model.trainable_variables`, as NumPy arrays, on whichever backend Keras runs (JAX: through
    `stateless_call`, jitted unless `jit=False`)."""
    backend = keras.backend.backend()
    x = np.asarray(x, np.float32)
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = model(x, training=training)
            loss = tf.reduce_sum(tf.sin(y))
        grads = tape.gradient(loss, [x, *model.trainable_variables])
    elif backend == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        other = [v.value for v in model.non_trainable_variables]

        def loss(x, trainable):
            y, _ = model.stateless_call(trainable, other, x, training=training)
            return jax.numpy.sum(jax.numpy.sin(y)), y

        run = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)
        run = jax.jit(run) if jit else run
        (_, y), (gx, gw) = run(x, trainable)
        grads = [gx, *gw]
    elif backend == "torch":
        import torch

        for v in model.trainable_variables:
            v.value.grad = None
        x = torch.tensor(x, requires_grad=True)
        y = model(x, training=training)
        torch.sin(y).sum().backward()
        grads = [x.grad, *(v.value.grad for v in model.trainable_variables)]
    else:
        raise ValueError(f"no gradients for backend {backend!r}")
    return (keras.ops.convert_to_numpy(y),
            [keras.ops.convert_to_numpy(g) for g in grads])


def assert_close(actual, desired, what="", rtol=1e-5, atol=1e-5):
    """float32 round-off between backends, relative to the array's scale (summation orders
    differ: fused kernels, convolution algorithms)."""
    desired = np.asarray(desired)
    scale = max(1.0, float(np.abs(desired).max())) if desired.size else 1.0
    np.testing.assert_allclose(actual, desired, rtol=rtol, atol=atol * scale, err_msg=what)


# == layers and zoo ================================================================================
# The highway layers and one zoo net of each family give the same outputs and gradients on
# TensorFlow, JAX and PyTorch for the same weights; HighwayStack's fast path on each backend
# equals the chain of HighwayDense layers; `import layers` on JAX / PyTorch imports no
# TensorFlow.

STACK_DEPTH, WIDTH, BATCH = 7, 6, 5


def variant_model(variant):
    """HighwayConv2D -> HighwayDense -> HighwayStack(7) of one variant, on (4, 4, 6) inputs:
    every layer's weights get a gradient from one loss. Biases drawn at random (gates neither
    open nor shut); explicit names, so a .weights.h5 file finds them in any process."""
    from layers import HighwayConv2D, HighwayDense, HighwayStack

    def biases(seed):
        return {"bias_initializer": keras.initializers.RandomNormal(seed=seed),
                "transform_bias_initializer": keras.initializers.RandomNormal(seed=seed + 1),
                "carry_bias_initializer": keras.initializers.RandomNormal(seed=seed + 2)}

    inputs = keras.Input((4, 4, WIDTH), name="x")
    x = HighwayConv2D(3, variant=variant, name="conv", kernel_initializer=
                      keras.initializers.GlorotUniform(seed=1), **biases(10))(inputs)
    x = HighwayDense(variant=variant, name="dense", kernel_initializer=
                     keras.initializers.GlorotUniform(seed=2), **biases(20))(x)
    x = HighwayStack(STACK_DEPTH, variant=variant, name="stack", kernel_initializer=
                     keras.initializers.GlorotUniform(seed=3), **biases(30))(x)
    return keras.Model(inputs, x, name=f"highway_{variant}")


def stack_and_chain(variant, activation):
    """A built HighwayStack with random biases and the chain of HighwayDense layers with its
    weights."""
    from layers import HighwayStack

    keras.utils.set_random_seed(0)
    stack = HighwayStack(STACK_DEPTH, activation=activation, variant=variant,
                         bias_initializer="random_normal",
                         transform_bias_initializer="random_normal",
                         carry_bias_initializer="random_normal")
    stack.build((None, WIDTH))
    return stack, stack.to_layers()


def _stack_vs_chain(variant, activation, hand_written, training, x):
    """(stack's output and grads, chain's output and grads) for x, kernel, bias."""
    stack, layers = stack_and_chain(variant, activation)
    stack.hand_written_backward = hand_written
    inputs = keras.Input(x.shape[1:])
    h = inputs
    for layer in layers:
        h = layer(h)
    chain = keras.Model(inputs, h)
    stacked = keras.Model(inputs, stack(inputs))
    y, grads = output_and_gradients(stacked, x, training)
    # (JAX: the chain op by op; compiling 7 layers each time costs more than running them.)
    y_chain, (gx, *g_chain) = output_and_gradients(chain, x, training, jit=False)
    return (y, grads), (y_chain, [gx, np.stack(g_chain[0::2]), np.stack(g_chain[1::2])])


# Every variant through the hand-written backward pass (tanh) and autodiff through the
# backend's loop (elu: no derivative in terms of the output); relu's derivative and
# hand_written_backward = False on the variant with the most branches.
STACK_CASES = [*((variant, activation, True)
                 for variant in ("coupled", "full", "c_only", "t_only", "residual", "plain")
                 for activation in ("tanh", "elu")),
               ("full", "relu", True), ("full", "tanh", False)]


def stack_vs_chain_on_this_backend(out, x):
    """Every (variant, activation, hand_written) of STACK_CASES: the stack's output and
    gradients minus the chain's, and the chain's scale, into `out`."""
    for variant, activation, hand_written in STACK_CASES:
        (y, grads), (y_chain, grads_chain) = _stack_vs_chain(variant, activation,
                                                             hand_written, True, x)
        for name, a, b in zip(("y", "dx", "dkernel", "dbias"), [y, *grads],
                              [y_chain, *grads_chain]):
            key = f"{variant}/{activation}/{hand_written}/{name}"
            out[key], out[key + "/chain"] = a, b


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_import_layers_imports_no_tensorflow(backend, tmp_path):
    # Importing the package, and running a stack forwards and backwards (its fast path on this
    # backend), needs no TensorFlow. (Keras itself imports TensorFlow, when installed, for
    # `get_config` and `keras.utils.set_random_seed`.)
    out = run_on_backend(backend, """
        import sys
        import layers
        OUT["after_import"] = "tensorflow" in sys.modules
        import keras
        import numpy as np
        import test_backends
        model = keras.Sequential([keras.Input((4,)), layers.HighwayStack(3)])
        test_backends.output_and_gradients(model, np.ones((2, 4), "float32"), training=True)
        OUT["after_a_step"] = "tensorflow" in sys.modules
        OUT["paths"] = ",".join(sorted(m for m in sys.modules if m.startswith("layers._stack")))
    """, tmp_path)
    assert not out["after_import"] and not out["after_a_step"]
    assert str(out["paths"]) == f"layers._stack_{backend}", out["paths"]


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_stack_fast_path_matches_the_per_layer_chain(backend, tmp_path):
    """On JAX and PyTorch: HighwayStack's outputs and gradients (input, kernel, bias) equal the
    HighwayDense chain's with the same weights, for every variant, through the hand-written
    backward pass (tanh, relu) and autodiff through the backend's loop (elu;
    hand_written_backward = False), on 3-D input."""
    x = np.random.default_rng(2).normal(size=(2, BATCH, WIDTH)).astype(np.float32)
    out = run_on_backend(backend, """
        import test_backends
        test_backends.stack_vs_chain_on_this_backend(OUT, IN["x"])
    """, tmp_path, x=x)
    for variant, activation, hand_written in STACK_CASES:
        for name in ("y", "dx", "dkernel", "dbias"):
            key = f"{variant}/{activation}/{hand_written}/{name}"
            assert_close(out[key], out[key + "/chain"], f"{backend} {key}")


def _layers_on_tensorflow(tmp_path, x):
    """Saves each variant's model's weights; TensorFlow's outputs and gradients (inference
    and training)."""
    expected = {}
    for variant in ("coupled", "full", "c_only", "t_only", "residual", "plain"):
        model = variant_model(variant)
        model.save_weights(tmp_path / f"{variant}.weights.h5")
        for training in (False, True):
            y, grads = output_and_gradients(model, x, training)
            expected[f"{variant}/{training}"] = [y, *grads]
    return expected


def layers_on_this_backend(out, x, folder):
    for variant in ("coupled", "full", "c_only", "t_only", "residual", "plain"):
        model = variant_model(variant)
        model.load_weights(Path(folder) / f"{variant}.weights.h5")
        for training in (False, True):
            # (JAX: jitted in training, as fit runs it; op by op in inference, as quick.)
            y, grads = output_and_gradients(model, x, training, jit=training)
            for i, value in enumerate([y, *grads]):
                out[f"{variant}/{training}/{i}"] = value


@pytest.fixture(scope="module")
def tensorflow_layers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("layers")
    x = np.random.default_rng(3).normal(size=(3, 4, 4, WIDTH)).astype(np.float32)
    return folder, x, _layers_on_tensorflow(folder, x)


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_layers_match_tensorflow(backend, tensorflow_layers):
    """HighwayConv2D, HighwayDense and HighwayStack of every variant: outputs and gradients
    (input and every weight) on JAX / PyTorch equal TensorFlow's for the same weights,
    in inference and in training (TensorFlow's hand-written backward pass)."""
    folder, x, expected = tensorflow_layers
    out = run_on_backend(backend, f"""
        import test_backends
        test_backends.layers_on_this_backend(OUT, IN["x"], {str(folder)!r})
    """, folder, x=x)
    for key, values in expected.items():
        names = ["y", "dx", "conv kernel", "conv bias", "dense kernel", "dense bias",
                 "stack kernel", "stack bias"]
        assert len(values) == len(names)
        for i, (value, name) in enumerate(zip(values, names)):
            assert_close(out[f"{key}/{i}"], value, f"{backend} {key} {name}")


def _zoo_cases():
    from zoo_cases import one_per_family

    return one_per_family()


def _case_id(case):
    name, overrides = case
    return name + ("_stacked" if overrides.get("stacked") else "")


def zoo_net(name, overrides):
    import zoo

    return zoo.load(name, **overrides)


def zoo_modes(model):
    """Inference; training too (batch statistics in the BN nets, the stack's training path)
    where the net has no dropout (random masks differ across backends) and is small (the
    shrunk ImageNet net's BN is the CIFAR one's: inference is enough there)."""
    dropout = any(isinstance(layer, keras.layers.Dropout) for layer in model._flatten_layers())
    return (False,) if dropout or model.count_params() > 250_000 else (False, True)


def zoo_nets_on_this_backend(out, cases, inputs, folder):
    """Every zoo case's outputs and gradients, in one process (one interpreter start-up for
    all: the per-family nets share it)."""
    for case in cases:
        key = _case_id(case)
        keras.backend.clear_session()
        model = zoo_net(*case)
        model.load_weights(f"{folder}/{key}.weights.h5")
        for training in zoo_modes(model):
            y, grads = output_and_gradients(model, inputs[f"x/{key}"], training)
            for i, value in enumerate([y, *grads]):
                out[f"{key}/{training}/{i}"] = value


@pytest.fixture(scope="module")
def tensorflow_zoo(tmp_path_factory):
    """Per zoo case: the weights file (in one folder), the input, TensorFlow's outputs and
    gradients, the weights' names."""
    folder, done = tmp_path_factory.mktemp("zoo"), {}
    for case in _zoo_cases():
        key = _case_id(case)
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        model = zoo_net(*case)
        model.save_weights(folder / f"{key}.weights.h5")
        shape = (2, *model.inputs[0].shape[1:])
        x = np.random.default_rng(4).uniform(0, 255, shape).astype(np.float32)
        expected = {training: [y, *grads] for training in zoo_modes(model)
                    for y, grads in [output_and_gradients(model, x, training)]}
        done[key] = (x, expected, [v.path for v in model.trainable_variables])
    return folder, done


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_zoo_nets_match_tensorflow(backend, tensorflow_zoo, tmp_path, subtests):
    """One zoo net of each family (shrunk as tests/zoo_cases.py says; the FC net also
    stacked): outputs and gradients (input and every weight) on JAX / PyTorch equal
    TensorFlow's for the same weights. One subtest per net."""
    folder, expected_by_case = tensorflow_zoo
    cases = _zoo_cases()
    out = run_on_backend(backend, f"""
        import test_backends
        test_backends.zoo_nets_on_this_backend(OUT, {cases!r}, IN, {str(folder)!r})
    """, tmp_path, timeout=600,
        **{f"x/{key}": x for key, (x, _, _) in expected_by_case.items()})
    for case in cases:
        key = _case_id(case)
        _, expected, names = expected_by_case[key]
        with subtests.test(msg=key):
            for training, values in expected.items():
                for i, (value, what) in enumerate(zip(values, ["y", "dx", *names])):
                    assert_close(out[f"{key}/{training}/{i}"], value,
                                 f"{backend} {key} {training} {what}")


# The analyses (zoo.analysis: gate statistics, lesioning, routing patterns) of a small FC net,
# per layer and stacked, give the same numbers on every backend for the same weights.

ANALYSIS_NETS = [("highway_fc10_mnist", {}), ("highway_fc10_mnist", {"stacked": True})]


def analyses_on_this_backend(out, name, overrides, x, labels, weights):
    from zoo.analysis import gate_statistics, lesion_errors
    from zoo.analysis.routing import routing_patterns

    model = zoo_net(name, overrides)
    if weights is not None:
        model.load_weights(weights)
    stats = gate_statistics(model, x, labels, batch_size=64)
    for key in ("transform_bias", "mean_t", "class_mean_t", "example_t", "example_output",
                "example_input"):
        out[f"gates/{key}"] = getattr(stats, key)
    out["gates/estimation"] = [[row["mean"], row["std"]] for row in stats.estimation]
    lesion = lesion_errors(model, x, labels, batch_size=64)
    out["lesion/baseline"], out["lesion/errors"] = lesion["baseline"], lesion["errors"]
    out["lesion/layers"] = lesion["layers"]
    out["routing"] = routing_patterns(model, x, batch_size=64)[0]
    return model


def analyses_of_every_net(out, x, labels, folder=None):
    """`analyses_on_this_backend` for each of ANALYSIS_NETS, its keys prefixed by the net's
    id, on the weights saved in `folder` (None: fresh random weights, TensorFlow's run, whose
    models the caller saves); yields each net's id and model."""
    for case in ANALYSIS_NETS:
        key = _case_id(case)
        keras.backend.clear_session()
        keras.utils.set_random_seed(1)
        found = {}
        path = None if folder is None else f"{folder}/{key}.weights.h5"
        model = analyses_on_this_backend(found, *case, x, labels, path)
        out.update({f"{key}/{name}": value for name, value in found.items()})
        yield key, model


@pytest.fixture(scope="module")
def tensorflow_analyses(tmp_path_factory):
    folder = tmp_path_factory.mktemp("analyses")
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 255, (150, 28, 28, 1)).astype(np.float32)
    labels = rng.integers(0, 10, 150)
    out = {}
    for key, model in analyses_of_every_net(out, x, labels):
        model.save_weights(folder / f"{key}.weights.h5")
    return folder, out, x, labels


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_analyses_match_tensorflow(backend, tensorflow_analyses, tmp_path, subtests):
    """gate_statistics (b_T, mean T overall, per class and for one example, block outputs,
    estimation errors), the lesion error rates and the routing patterns of a random FC net,
    per layer and stacked (a subtest each), on JAX / PyTorch equal TensorFlow's for the same
    weights."""
    folder, expected, x, labels = tensorflow_analyses
    out = run_on_backend(backend, f"""
        import test_backends
        for _ in test_backends.analyses_of_every_net(OUT, IN["x"], IN["labels"],
                                                     {str(folder)!r}):
            pass
    """, tmp_path, x=x, labels=labels)
    assert set(out) == set(expected)
    for case in ANALYSIS_NETS:
        net = _case_id(case)
        with subtests.test(msg=net):
            np.testing.assert_array_equal(out[f"{net}/lesion/layers"],
                                          expected[f"{net}/lesion/layers"])
            # Error rates: the same predictions, example for example.
            assert float(out[f"{net}/lesion/baseline"]) == expected[f"{net}/lesion/baseline"]
            np.testing.assert_array_equal(out[f"{net}/lesion/errors"],
                                          expected[f"{net}/lesion/errors"])
            for key in sorted(k for k in expected if k.startswith(net + "/")
                              and "/lesion/" not in k):
                assert_close(out[key], expected[key], f"{backend} {key}")


# The character-aware language model (zoo/char_lm/; not in zoo_cases: its input is character
# ids, not pixels), tiny: forwards, then one SGD step, the same on every backend.

LM_NAME = "lstm_char_small_ptb"
LM_OVERRIDES = {"lstm_units": 8, "classes": 30, "char_vocab_size": 20, "input_shape": (None, 8),
                "dropout": 0.0}  # no dropout: random masks differ across backends


def char_lm_on_this_backend(out, chars, targets, weights=None):
    """The tiny LM's logits for `chars`, the loss of one SGD step on `targets` and the logits
    after it; on `weights`, or fresh ones (TensorFlow's run, whose model the caller saves)."""
    import zoo

    keras.utils.set_random_seed(0)
    model = zoo.load(LM_NAME, **LM_OVERRIDES)
    if weights is not None:
        model.load_weights(weights)
    out["logits"] = keras.ops.convert_to_numpy(model(chars))
    model.compile(optimizer=keras.optimizers.SGD(1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    out["loss"] = model.train_on_batch(chars, targets)
    out["after"] = keras.ops.convert_to_numpy(model(chars))
    return model


@pytest.fixture(scope="module")
def tensorflow_char_lm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("char_lm")
    rng = np.random.default_rng(6)
    chars = np.zeros((3, 5, 8), np.int32)
    chars[..., 0], chars[..., 4] = 1, 2  # START, three characters, END, padding
    chars[..., 1:4] = rng.integers(3, 20, (3, 5, 3))
    targets = rng.integers(0, 30, (3, 5)).astype(np.int32)
    out = {}
    weights = folder / "char_lm.weights.h5"
    # The weights before the step: save a fresh model's, then run TensorFlow's step on them.
    keras.utils.set_random_seed(0)
    import zoo

    zoo.load(LM_NAME, **LM_OVERRIDES).save_weights(weights)
    char_lm_on_this_backend(out, chars, targets, weights)
    return weights, chars, targets, out


@pytest.mark.parametrize("backend", OTHER_BACKENDS)
def test_char_lm_forward_and_a_train_step_match_tensorflow(backend, tensorflow_char_lm,
                                                           tmp_path):
    weights, chars, targets, expected = tensorflow_char_lm
    out = run_on_backend(backend, f"""
        import test_backends
        test_backends.char_lm_on_this_backend(OUT, IN["chars"], IN["targets"],
                                              {str(weights)!r})
    """, tmp_path, chars=chars, targets=targets)
    assert np.isfinite(float(out["loss"]))
    assert np.abs(expected["after"] - expected["logits"]).max() > 1e-3  # the step did something
    for key in ("logits", "loss", "after"):
        assert_close(out[key], expected[key], f"{backend} char LM {key}")


_CARRIED_STATES = """
import keras
import numpy as np
import zoo
from zoo.char_lm import set_trained_weights, trained_weights
args = dict(lstm_units=8, classes=50, input_shape=(None, 9), dropout=0.0)
x, y = IN["x"], IN["y"]
stateful = zoo.load("lstm_char_small_ptb", stateful=True, batch_size=1, **args)
stateless = zoo.load("lstm_char_small_ptb", **args)
# Weights large enough for the states to matter (Kim's +-0.05 start barely uses them).
rng = np.random.default_rng(1)
set_trained_weights(stateful, [rng.normal(0, 0.5, w.shape) for w in trained_weights(stateful)])
set_trained_weights(stateless, trained_weights(stateful))
OUT["whole"] = keras.ops.convert_to_numpy(stateless(x))
OUT["halves"] = np.concatenate([keras.ops.convert_to_numpy(stateless(x[:, :10])),
                                keras.ops.convert_to_numpy(stateless(x[:, 10:]))], axis=1)
OUT["chunks"] = np.concatenate([stateful.predict_on_batch(x[:, :10]),
                                stateful.predict_on_batch(x[:, 10:])], axis=1)
stateful.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                 optimizer=keras.optimizers.SGD(0.0))
for layer in stateful.layers:
    if getattr(layer, "stateful", False):
        layer.reset_state()
two_batches = (np.concatenate([x[:, :10], x[:, 10:]]), np.concatenate([y[:, :10], y[:, 10:]]))
OUT["fit"] = stateful.fit(*two_batches, batch_size=1, shuffle=False, verbose=0
                          ).history["loss"][-1]
for layer in stateful.layers:
    if getattr(layer, "stateful", False):
        layer.reset_state()
OUT["evaluate"] = stateful.evaluate(*two_batches, batch_size=1, verbose=0)
"""


@pytest.mark.parametrize("backend", ("tensorflow", *OTHER_BACKENDS))
def test_language_model_states_carry_from_batch_to_batch(backend, tmp_path):
    """Kim's training reads a text in contiguous batches, each continuing the last from its
    states. keras.layers.LSTM(stateful=True) does not carry them on JAX (its states are
    constants of JAX's traced steps: every batch starts from zeros); the zoo's stateful LSTM
    (layers.CarriedStateLSTM) does on every backend: a text fed in two batches through
    predict, fit (learning rate 0) and evaluate gives what a stateless net gives on it whole."""
    rng = np.random.default_rng(0)
    x = rng.integers(3, 51, (1, 20, 9)).astype("int32")
    y = rng.integers(0, 50, (1, 20)).astype("int32")
    out = run_on_backend(backend, _CARRIED_STATES, tmp_path, x=x, y=y)
    np.testing.assert_allclose(out["chunks"], out["whole"], atol=1e-5)

    def loss(logits):
        logits = logits[0].astype(np.float64)
        top = logits.max(-1, keepdims=True)
        log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
        return -log_probs[np.arange(20), y[0]].mean()

    carried, restarted = loss(out["whole"]), loss(out["halves"])
    assert abs(carried - restarted) > 1e-3 * carried  # the check can tell them apart
    assert float(out["fit"]) == pytest.approx(carried, rel=1e-5)
    assert float(out["evaluate"]) == pytest.approx(carried, rel=1e-5)
