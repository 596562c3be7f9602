"""HighwayStack (layers/highway_stack.py) against a chain of HighwayDense layers with the same
weights: outputs, gradients, per-layer gates, lesioning, conversion and .keras round trips."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from layer_test_helper import run_layer_battery

from layers import VARIANTS, HighwayDense
from layers.highway_stack import UNROLL, HighwayStack, stack_weights, unstack_weights

DEPTH, WIDTH, BATCH = 7, 6, 5
FAST_ACTIVATIONS = ["tanh", "sigmoid", "relu", "linear"]  # derivative in terms of the output


def _pair(variant, seed=0, activation="tanh", unroll=UNROLL):
    """A built stack with non-trivial weights and the equivalent HighwayDense chain."""
    keras.utils.set_random_seed(seed)
    stack = HighwayStack(DEPTH, activation=activation, variant=variant, unroll=unroll,
                         bias_initializer="random_normal",
                         transform_bias_initializer="random_normal",
                         carry_bias_initializer="random_normal")
    stack.build((None, WIDTH))
    return stack, stack.to_layers()


def _chain(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def _x(seed=1):
    return np.random.default_rng(seed).normal(size=(BATCH, WIDTH)).astype("float32")


def _graph_nodes(fn, *args):
    """Every node of `fn`'s traced graph, the loop bodies' and gradient functions' included."""
    graph_def = fn.get_concrete_function(*args).graph.as_graph_def()
    return [*graph_def.node, *(n for f in graph_def.library.function for n in f.node_def)]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("activation", FAST_ACTIVATIONS)
def test_eager_outputs_and_gradients_match_the_per_layer_chain(variant, activation):
    # training=True runs the hand-written backward pass; training=None is inference, as in
    # every Keras layer, and a GradientTape still differentiates it (autodiff through the loop).
    stack, layers = _pair(variant, activation=activation)
    x = tf.constant(_x())
    for training in (True, None):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            y_stack = stack(x, training=training)
            y_chain = _chain(layers, x)
            loss_stack = tf.reduce_sum(tf.sin(y_stack))
            loss_chain = tf.reduce_sum(tf.sin(y_chain))
        np.testing.assert_allclose(y_stack, y_chain, rtol=1e-6, atol=1e-6)
        # Gradients are sums over the batch in float32, in another order on each path: 2e-5
        # absolute (seen: 6e-6 on TensorFlow's CPU kernels without oneDNN); a wrong gradient is
        # off by the gradient's own size, about 0.1 here.
        np.testing.assert_allclose(tape.gradient(loss_stack, x), tape.gradient(loss_chain, x),
                                   rtol=1e-5, atol=2e-5)
        g_kernel, g_bias = tape.gradient(loss_stack, [stack.kernel, stack.bias])
        g_chain = tape.gradient(loss_chain,
                                [w for layer in layers for w in (layer.kernel, layer.bias)])
        np.testing.assert_allclose(g_kernel, np.stack(g_chain[0::2]), rtol=1e-5, atol=2e-5)
        np.testing.assert_allclose(g_bias, np.stack(g_chain[1::2]), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize(
    "activation, lesioned, hand_written, fast",
    [(a, False, True, True) for a in FAST_ACTIVATIONS]
    + [("elu", False, True, False),  # no derivative in terms of the output
       ("tanh", True, True, False),  # lesioning: the autodiff path
       ("tanh", False, False, False)],  # forced off
)
def test_takes_the_fast_path_where_it_should(activation, lesioned, hand_written, fast):
    """The fast path writes every layer out (unroll at a time: one matmul per branch per
    layer in the graph) and trains through its custom gradient; the fallback scans one
    fused matmul, autodiffed. Counted in the traced graphs."""
    stack, _ = _pair("full", activation=activation)  # 3 branches
    stack.lesioned_layers = {2} if lesioned else set()
    if not hand_written:
        stack.hand_written_backward = False  # otherwise the default
    spec = tf.TensorSpec((None, WIDTH))

    def traced(training):
        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = stack(x, training=training)
            return y, tape.gradient(y, x)

        return _graph_nodes(step, spec)

    forward = _graph_nodes(tf.function(lambda x: stack(x, training=False)), spec)
    assert sum(n.op == "MatMul" for n in forward) == (DEPTH * 3 if fast else 1)
    for training, custom in ((True, fast), (None, False)):  # None: inference, as in Keras
        nodes = traced(training)
        assert any("_gradient_op_type" in n.attr for n in nodes) == custom, training


def _training(stack):
    """The stack called with training=True: its hand-written backward pass where it has one
    (training=None is inference, differentiated by autodiff)."""
    return lambda x: stack(x, training=True)


def _loss_and_grads(fn, x, weights, jit=False):
    """sum(sin(fn(x))) and its gradients for x and `weights`, computed in a tf.function."""

    @tf.function(jit_compile=jit)
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
            loss = tf.reduce_sum(tf.sin(y))
        return y, tape.gradient(loss, [x, *weights])

    return run(tf.constant(x))


def _check_against_the_chain(variant, activation, unroll):
    """Outputs and gradients of the stack, in a graph with 3-D input, equal the chain's."""
    stack, layers = _pair(variant, activation=activation, unroll=unroll)
    x = np.random.default_rng(2).normal(size=(2, BATCH, WIDTH)).astype("float32")  # 3-D input
    y_stack, (gx, g_kernel, g_bias) = _loss_and_grads(_training(stack), x,
                                                      [stack.kernel, stack.bias])
    chain_weights = [w for layer in layers for w in (layer.kernel, layer.bias)]
    y_chain, (gx_chain, *g_chain) = _loss_and_grads(lambda x: _chain(layers, x), x,
                                                    chain_weights)

    def close(actual, desired):  # float32 round-off, relative to the array's scale: the
        # stack's per-branch matmuls sum in another order than the chain's fused [H | T | C] one
        desired = np.asarray(desired)
        np.testing.assert_allclose(actual, desired, rtol=1e-5,
                                   atol=5e-6 * max(1.0, np.abs(desired).max()))

    close(y_stack, y_chain)
    close(gx, gx_chain)
    close(g_kernel, np.stack(g_chain[0::2]))
    close(g_bias, np.stack(g_chain[1::2]))
    # Inference (training=False) runs the loop without keeping activations: same outputs.
    close(stack(x, training=False), y_chain)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("activation", ["tanh", "sigmoid", "relu", "linear", "elu"])
def test_fast_path_matches_the_per_layer_chain_in_a_graph(variant, activation):
    # tanh, sigmoid, relu and linear take the hand-written backward pass; elu (no derivative in
    # terms of the output) autodiffs through the loop. Both must equal the HighwayDense chain.
    _check_against_the_chain(variant, activation, UNROLL)


@pytest.mark.parametrize("variant", VARIANTS)
# Depth 7: the default 4 (above) loops once and writes 3 out after; here written out whole (7),
# a loop of chunks and a tail (3: 2 x 3 + 1; 2: 3 x 2 + 1), a loop and no tail (1: 7 x 1).
@pytest.mark.parametrize("unroll", [7, 3, 2, 1])
def test_chunked_loop_matches_the_per_layer_chain(variant, unroll):
    _check_against_the_chain(variant, "tanh", unroll)


def test_autodiff_switch_gives_the_same_gradients():
    stack, _ = _pair("full")
    x = np.random.default_rng(4).normal(size=(BATCH, WIDTH)).astype("float32")
    fast = _loss_and_grads(_training(stack), x, [stack.kernel, stack.bias])
    stack.hand_written_backward = False
    slow = _loss_and_grads(_training(stack), x, [stack.kernel, stack.bias])
    for a, b in zip([fast[0], *fast[1]], [slow[0], *slow[1]]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("unroll", [UNROLL, 3])
def test_fast_path_compiles_with_xla(unroll):
    stack, layers = _pair("coupled", unroll=unroll)
    y, (gx, g_kernel, g_bias) = _loss_and_grads(_training(stack), _x(),
                                                [stack.kernel, stack.bias], jit=True)
    y_chain, (gx_chain, *g_chain) = _loss_and_grads(
        lambda x: _chain(layers, x), _x(), [w for layer in layers for w in layer.weights])
    np.testing.assert_allclose(y, y_chain, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, gx_chain, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_kernel, np.stack(g_chain[0::2]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_bias, np.stack(g_chain[1::2]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("unroll", [UNROLL, 3])
def test_fast_path_trains_like_the_per_layer_net(unroll):
    # A few Adam steps from the same weights on the same batches end at the same weights.
    stack, layers = _pair("coupled", unroll=unroll)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(32, WIDTH)).astype("float32")
    y = rng.integers(0, 3, 32)

    def model(hidden):
        inputs = keras.Input((WIDTH,))
        h = inputs
        for layer in hidden:
            h = layer(h)
        head = keras.layers.Dense(3, activation="softmax", kernel_initializer="ones")
        m = keras.Model(inputs, head(h))
        m.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
        return m

    stacked, per_layer = model([stack]), model(layers)
    for _ in range(5):
        stacked.train_on_batch(x, y)
        per_layer.train_on_batch(x, y)
    head, head_chain = stacked.layers[-1], per_layer.layers[-1]
    assert not np.array_equal(head.kernel, np.ones(head.kernel.shape))  # it trained
    pairs = [(stack.kernel, [layer.kernel for layer in layers]),
             (stack.bias, [layer.bias for layer in layers]),
             (head.kernel, [head_chain.kernel]), (head.bias, [head_chain.bias])]
    assert len(pairs) == len(stacked.weights) and len(layers) * 2 + 2 == len(per_layer.weights)
    for weight, chain_weights in pairs:
        expected = np.stack(chain_weights) if len(chain_weights) > 1 else chain_weights[0]
        np.testing.assert_allclose(weight, expected, rtol=1e-4, atol=1e-5, err_msg=weight.path)


def test_traced_in_a_model_with_unknown_batch():
    stack, layers = _pair("coupled")
    inputs = keras.Input((WIDTH,))
    model = keras.Model(inputs, stack(inputs))
    x = _x()
    np.testing.assert_allclose(model.predict(x, verbose=0), _chain(layers, x), rtol=1e-6,
                               atol=1e-6)


@pytest.mark.parametrize("variant", ["coupled", "c_only", "plain"])
def test_per_layer_analysis_equals_each_dense_layer(variant):
    stack, layers = _pair(variant)
    x = _x()
    ts, cs, hs = stack.transform_gates(x), stack.carry_gates(x), stack.block_states(x)
    outs, ins = stack.layer_outputs(x), stack.layer_inputs(x)
    assert tuple(ts.shape) == (DEPTH, BATCH, WIDTH)
    h = x
    for i, layer in enumerate(layers):
        np.testing.assert_allclose(ins[i], h, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(ts[i], layer.transform_gate(h), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(cs[i], layer.carry_gate(h), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(hs[i], layer.block_state(h), rtol=1e-6, atol=1e-6)
        h = layer(h)
        np.testing.assert_allclose(outs[i], h, rtol=1e-6, atol=1e-6)
    if variant == "coupled":
        np.testing.assert_array_equal(stack.transform_bias,
                                      np.stack([lay.transform_bias for lay in layers]))
    assert stack.layer_names() == [f"highway_{i}" for i in range(1, DEPTH + 1)]
    assert [layer.name for layer in layers] == stack.layer_names()


@pytest.mark.parametrize("variant", ["coupled", "full", "residual", "plain"])
def test_lesioning_matches_dense_lesioning(variant):
    stack, layers = _pair(variant)
    x = _x()
    lesion = {0, 3, DEPTH - 1}
    stack.lesioned_layers = set(lesion)
    for i in lesion:
        layers[i].lesioned = True
    np.testing.assert_allclose(stack(x), _chain(layers, x), rtol=1e-6, atol=1e-6)
    ins, outs = stack.layer_inputs(x), stack.layer_outputs(x)
    for i in lesion:
        np.testing.assert_array_equal(outs[i], ins[i])  # bit for bit
    stack.lesioned_layers = set(range(DEPTH))
    np.testing.assert_array_equal(stack(x), x)
    stack.lesioned_layers = {DEPTH}
    with pytest.raises(ValueError, match="out of range"):
        stack(x)


def test_conversion_round_trip_is_exact():
    stack, layers = _pair("full")
    back = HighwayStack.from_layers(layers)
    assert back.get_config()["variant"] == "full" and back.depth == DEPTH
    np.testing.assert_array_equal(back.kernel, stack.kernel)
    np.testing.assert_array_equal(back.bias, stack.bias)
    kernel, bias = stack_weights(layers)
    np.testing.assert_array_equal(kernel, stack.kernel)
    for (k, b), layer in zip(unstack_weights(stack), layers):
        np.testing.assert_array_equal(k, layer.kernel)
        np.testing.assert_array_equal(b, layer.bias)
    with pytest.raises(ValueError, match="variant"):
        HighwayStack.from_layers([layers[0], HighwayDense("tanh", variant="coupled")])


def test_weights_saved_by_one_path_load_into_the_other(tmp_path):
    """A per-layer model's .keras file loads into a stacked model (and back), bit for bit."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((WIDTH,))
    chain = [HighwayDense(activation="tanh", transform_bias_initializer=-1.0,
                          bias_initializer="random_normal", name=f"highway_{i + 1}")
             for i in range(DEPTH)]
    per_layer = keras.Model(inputs, _chain(chain, inputs))
    path = tmp_path / "per_layer.keras"
    per_layer.save(path)
    loaded = keras.models.load_model(path)
    dense = [loaded.get_layer(f"highway_{i + 1}") for i in range(DEPTH)]
    stack = HighwayStack.from_layers(dense)
    x = _x()
    np.testing.assert_allclose(stack(x), per_layer(x), rtol=1e-6, atol=1e-6)

    inputs = keras.Input((WIDTH,))
    stacked = keras.Model(inputs, stack(inputs))
    path = tmp_path / "stacked.keras"
    stacked.save(path)
    reloaded = keras.models.load_model(path)
    assert isinstance(reloaded.layers[-1], HighwayStack)
    np.testing.assert_array_equal(reloaded.predict(x, verbose=0), stacked.predict(x, verbose=0))
    for layer, original in zip(reloaded.layers[-1].to_layers(), chain):
        for a, b in zip(layer.get_weights(), original.get_weights()):
            np.testing.assert_array_equal(a, b)


def test_initialisation_matches_per_layer_statistics():
    keras.utils.set_random_seed(0)
    stack = HighwayStack(40, kernel_initializer="glorot_uniform", transform_bias_initializer=-3.0)
    stack.build((None, 50))
    kernel, bias = np.asarray(stack.kernel), np.asarray(stack.bias)
    limit = np.sqrt(6.0 / (50 + 50))  # one branch's Glorot limit
    assert np.abs(kernel).max() <= limit and np.abs(kernel).max() > 0.95 * limit
    assert not np.allclose(kernel[..., :50], kernel[..., 50:])  # W_H != W_T
    assert not np.allclose(kernel[0], kernel[1])  # layers differ
    np.testing.assert_array_equal(bias[:, :50], 0.0)
    np.testing.assert_array_equal(bias[:, 50:], -3.0)
    keras.utils.set_random_seed(0)
    ortho = HighwayStack(3, kernel_initializer="orthogonal")  # per-layer fallback
    ortho.build((None, 8))
    k = np.asarray(ortho.kernel)
    np.testing.assert_allclose(k[1, :, :8] @ k[1, :, :8].T, np.eye(8), atol=1e-5)
    assert not np.allclose(k[..., :8], k[..., 8:]) and not np.allclose(k[0], k[1])


def test_layer_battery(tmp_path):
    run_layer_battery(lambda: HighwayStack(3, variant="coupled"), (4, 8),
                      [(3, 8, 16), (3, 16)], tmp_path, masking_input_shape=(3, 5, 8))


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="depth"):
        HighwayStack(0)
    with pytest.raises(ValueError, match="variant"):
        HighwayStack(3, variant="gated")
    for unroll in (0, 2.5, True):
        with pytest.raises(ValueError, match="unroll must be an integer >= 1"):
            HighwayStack(3, unroll=unroll)


def test_a_built_stack_refuses_inputs_of_another_width():
    stack = HighwayStack(2)
    stack(np.zeros((1, 8), "float32"))
    with pytest.raises(ValueError, match=r"expected axis -1 of input shape to have value 8"):
        stack(np.zeros((1, 6), "float32"))


def test_unroll_is_config_and_does_not_change_the_weights_layout(tmp_path):
    stack, layers = _pair("full", unroll=3)
    assert HighwayStack.from_config(stack.get_config()).unroll == 3
    # Weights saved from a stack that loops load into one written out whole, same results.
    inputs = keras.Input((WIDTH,))
    model = keras.Model(inputs, stack(inputs))
    model.save_weights(tmp_path / "s.weights.h5")
    whole = HighwayStack(DEPTH, variant="full", unroll=DEPTH)
    other = keras.Model(inputs, whole(inputs))
    other.load_weights(tmp_path / "s.weights.h5")
    np.testing.assert_allclose(other.predict(_x(), verbose=0), _chain(layers, _x()), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("variant", ["coupled", "full"])
def test_gradients_flow_through_inference_in_a_graph(variant):
    # A user's GradientTape around model(x) (training=None: inference) still gets the
    # gradients, from TF's autodiff through the inference loop (a chunked loop and a tail).
    stack, layers = _pair(variant, unroll=3)
    x = _x()
    y, (gx, g_kernel, g_bias) = _loss_and_grads(stack, x, [stack.kernel, stack.bias])
    y_chain, (gx_chain, *g_chain) = _loss_and_grads(
        lambda x: _chain(layers, x), x, [w for layer in layers for w in layer.weights])
    np.testing.assert_allclose(y, y_chain, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, gx_chain, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_kernel, np.stack(g_chain[0::2]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_bias, np.stack(g_chain[1::2]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", ["coupled", "c_only", "residual"])
def test_mean_transform_gates_are_the_per_layer_means(variant):
    stack, layers = _pair(variant)
    x = np.random.default_rng(5).normal(size=(BATCH, 2, WIDTH)).astype("float32")  # 3-D input
    expected = np.asarray(stack.transform_gates(x)).mean(axis=(2, 3)).T  # (batch, depth)
    means = stack.mean_transform_gates(x)
    assert tuple(means.shape) == (BATCH, DEPTH)
    np.testing.assert_allclose(means, expected, rtol=1e-6, atol=1e-7)
    traced = tf.function(stack.mean_transform_gates,
                         input_signature=[tf.TensorSpec((None, 2, WIDTH))])  # unknown batch
    np.testing.assert_allclose(traced(x), expected, rtol=1e-6, atol=1e-7)
    stack.lesioned_layers = {1, 4}
    lesioned = np.asarray(stack.mean_transform_gates(x))
    np.testing.assert_array_equal(lesioned[:, [1, 4]], 0.0)
    np.testing.assert_allclose(lesioned, np.asarray(stack.transform_gates(x)).mean(axis=(2, 3)).T,
                               rtol=1e-6, atol=1e-7)


def test_an_ordinary_forward_pass_logs_no_tensorflow_errors(tmp_path):
    # Each of these once logged "ERROR:tensorflow ... TensorArray ... never used" at exit,
    # from the per-layer arrays a training pass keeps for a backward pass never taken.
    script = tmp_path / "forward.py"
    script.write_text(textwrap.dedent("""
        import keras, numpy as np
        from layers import HighwayStack
        inputs = keras.Input((6,))
        model = keras.Model(inputs, keras.layers.Dense(2)(HighwayStack(5, unroll=2)(inputs)))
        x = np.ones((4, 6), "float32")
        model(x)
        model(x, training=True)
        model.predict(x, verbose=0)
        model.compile("adam", "mse")
        model.fit(x, np.zeros((4, 2)), verbose=0)
        print("done")
    """))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "done", run.stderr[-2000:]
    assert "ERROR:tensorflow" not in run.stderr and "never used" not in run.stderr, run.stderr
