"""The benchmark's reference trainers: NumPy (hand-written backward pass) and PyTorch eager.

Checks the NumPy gradients against finite differences, PyTorch autograd and Keras (the
repository's `HighwayStack`) on the same weights, and that each trainer learns and reports.
"""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks.implementations import numpy_highway as nh

ROOT = Path(__file__).resolve().parents[1]

RESULT_KEYS = {
    "build_s", "first_step_s", "epoch_s", "step_s", "steps", "steps_per_epoch", "total_s",
    "final_loss", "test_accuracy", "params",
}


def _batch(n, n_inputs=784, n_classes=10, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.random((n, n_inputs), dtype=np.float32),
            rng.integers(0, n_classes, n).astype(np.int64))


def _learnable_data(n_train=600, n_test=200, seed=0):
    """MNIST-shaped data whose label is set by the input: one random pattern per class, mixed
    with as much uniform noise, in [0, 1]."""
    rng = np.random.default_rng(seed)
    patterns = rng.random((10, 784), dtype=np.float32)

    def draw(n):
        y = rng.integers(0, 10, n).astype(np.int64)
        x = 0.5 * patterns[y] + 0.5 * rng.random((n, 784), dtype=np.float32)
        return x.astype(np.float32), y

    (x_train, y_train), (x_test, y_test) = draw(n_train), draw(n_test)
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def _relative_error(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(a) + np.linalg.norm(b), 1e-30)


def _assert_close_grads(actual, expected, rtol=1e-4, atol=1e-6):
    for key in nh.PARAM_KEYS:
        assert actual[key].shape == expected[key].shape, key
        np.testing.assert_allclose(actual[key], expected[key], rtol=rtol, atol=atol,
                                   err_msg=key)


def _check_result(result, data, epochs, batch_size=128):
    assert set(result) == RESULT_KEYS
    steps_per_epoch = math.ceil(len(data["x_train"]) / batch_size)
    assert result["steps_per_epoch"] == steps_per_epoch
    assert result["steps"] == epochs * steps_per_epoch
    assert len(result["epoch_s"]) == len(result["step_s"]) == epochs
    assert all(s > 0 for s in result["epoch_s"])
    assert result["build_s"] >= 0
    assert 0 < result["first_step_s"] <= result["total_s"]
    assert result["total_s"] == pytest.approx(result["build_s"] + sum(result["epoch_s"]))
    assert math.isfinite(result["final_loss"]) and 0 < result["final_loss"] < math.log(10)
    assert 0.5 < result["test_accuracy"] <= 1.0


# -- NumPy ---------------------------------------------------------------------------------


def test_numpy_init_params_layout():
    params = nh.init_params(depth=4, width=8, transform_bias=-3.0, seed=0)
    assert {k: v.shape for k, v in params.items()} == {
        "stem_kernel": (784, 8), "stem_bias": (8,), "kernel": (4, 8, 16), "bias": (4, 16),
        "head_kernel": (8, 10), "head_bias": (10,),
    }
    assert all(v.dtype == np.float32 for v in params.values())
    assert np.all(params["bias"][:, :8] == 0) and np.all(params["bias"][:, 8:] == -3.0)
    assert np.all(params["stem_bias"] == 0) and np.all(params["head_bias"] == 0)
    assert np.abs(params["stem_kernel"]).max() <= 1 / math.sqrt(784)
    assert np.abs(params["kernel"]).max() <= 1 / math.sqrt(8)
    assert np.abs(params["head_kernel"]).max() <= 1 / math.sqrt(8)
    # Not degenerate: the bound is nearly reached.
    assert np.abs(params["kernel"]).max() > 0.9 / math.sqrt(8)


def test_numpy_gradients_match_finite_differences():
    params = nh.init_params(depth=3, width=6, transform_bias=-1.0, seed=0, n_inputs=20)
    params = {key: value.astype(np.float64) for key, value in params.items()}
    # Larger gate-bias spread than the init, so the gates are not all alike.
    params["bias"] += np.random.default_rng(2).normal(0, 0.5, params["bias"].shape)
    x, y = _batch(5, n_inputs=20)
    x = x.astype(np.float64)
    loss, grads = nh.loss_and_grads(params, x, y)
    assert all(g.dtype == np.float64 for g in grads.values())

    eps = 1e-6
    for key in nh.PARAM_KEYS:
        numeric = np.zeros_like(params[key])
        flat, numeric_flat = params[key].reshape(-1), numeric.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            plus, _ = nh.loss_and_grads(params, x, y)
            flat[i] = old - eps
            minus, _ = nh.loss_and_grads(params, x, y)
            flat[i] = old
            numeric_flat[i] = (plus - minus) / (2 * eps)
        assert _relative_error(grads[key], numeric) < 1e-5, key


def test_numpy_stays_float32():
    params = nh.init_params(depth=3, width=8, seed=0)
    x, y = _batch(7)
    loss, grads = nh.loss_and_grads(params, x, y)
    assert isinstance(loss, float)
    assert all(g.dtype == np.float32 for g in grads.values())
    probabilities = nh.forward(params, x)
    assert probabilities.dtype == np.float32 and probabilities.shape == (7, 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=1e-5)
    # The loss is the mean cross-entropy of those probabilities.
    expected = -np.log(probabilities[np.arange(7), y]).mean()
    assert loss == pytest.approx(float(expected), rel=1e-5)


def test_numpy_module_imports_neither_torch_nor_tensorflow():
    path = ROOT / "benchmarks" / "implementations" / "numpy_highway.py"
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('numpy_highway', {str(path)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "bad = [m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_numpy_trains_and_reports():
    data = _learnable_data()
    result = nh.train(data, depth=3, epochs=3)
    _check_result(result, data, epochs=3)
    assert result["params"] == 784 * 50 + 50 + 3 * (50 * 100 + 100) + 50 * 10 + 10


def test_numpy_is_deterministic():
    data = _learnable_data(n_train=300, n_test=50)
    first = nh.train(data, depth=3, epochs=2, seed=3)
    second = nh.train(data, depth=3, epochs=2, seed=3)
    assert first["final_loss"] == second["final_loss"]
    assert first["test_accuracy"] == second["test_accuracy"]
    other = nh.train(data, depth=3, epochs=2, seed=4)
    assert other["final_loss"] != first["final_loss"]


def test_numpy_max_steps():
    data = _learnable_data(n_train=600, n_test=50)
    result = nh.train(data, depth=2, epochs=5, max_steps=7)
    assert result["steps"] == 7 and result["steps_per_epoch"] == 5
    assert len(result["epoch_s"]) == 2


# -- PyTorch -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def th():
    pytest.importorskip("torch")
    from benchmarks.implementations import torch_highway

    return torch_highway


def _torch_grads(model):
    """The model's gradients in `numpy_highway`'s layout."""

    def g(parameter):
        return parameter.grad.detach().numpy()

    return {
        "stem_kernel": g(model.stem.weight).T,
        "stem_bias": g(model.stem.bias),
        "kernel": np.stack([np.concatenate([g(b.H.weight).T, g(b.T.weight).T], axis=1)
                            for b in model.blocks]),
        "bias": np.stack([np.concatenate([g(b.H.bias), g(b.T.bias)]) for b in model.blocks]),
        "head_kernel": g(model.head.weight).T,
        "head_bias": g(model.head.bias),
    }


def test_numpy_matches_torch_autograd(th):
    import torch
    import torch.nn.functional as F

    params = nh.init_params(depth=4, width=8, transform_bias=-1.0, seed=5)
    x, y = _batch(16)
    loss, grads = nh.loss_and_grads(params, x, y)

    model = th.load_params(th.build_model(depth=4, width=8, seed=0), params)
    torch_loss = F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
    torch_loss.backward()
    assert loss == pytest.approx(torch_loss.item(), rel=1e-5)
    _assert_close_grads(grads, _torch_grads(model))
    probabilities = torch.softmax(model(torch.from_numpy(x)), dim=1).detach().numpy()
    np.testing.assert_allclose(nh.forward(params, x), probabilities, rtol=1e-4, atol=1e-6)


def _numpy_steps(params, batches, learning_rate, clipnorm, epsilon=1e-7):
    """`params` after one Adam step (with clipping) per batch, the NumPy way; and the
    gradient norms seen."""
    flat, views = nh.pack(params)
    grad_flat, grads = nh.pack(params)
    optimizer = nh.Adam(flat, learning_rate, clipnorm, epsilon=epsilon)
    norms = []
    for x, y in batches:
        nh.loss_and_grads(views, x, y, grads)
        norms.append(float(np.linalg.norm(grad_flat)))
        optimizer.apply(grad_flat)
    return views, norms


def test_numpy_adam_with_clipping_matches_torch(th):
    import torch
    import torch.nn.functional as F

    params = nh.init_params(depth=3, width=8, transform_bias=-1.0, seed=7)
    batches = [_batch(16, seed=s) for s in range(6)]
    clipnorm = 0.5
    # PyTorch adds epsilon to the bias-corrected sqrt(v_t), Keras (and NumPy here) to the
    # uncorrected one, which at step t is PyTorch's with epsilon / sqrt(1 - beta_2^t) (31.6
    # epsilon at step 1): the two differ by up to a step's size on gradient entries of the
    # order of 1e-6. A negligible epsilon in both makes them the same function.
    epsilon = 1e-12
    stepped, norms = _numpy_steps(params, batches, 1e-2, clipnorm, epsilon)
    assert max(norms) > clipnorm > min(norms)  # both branches of the clipping taken

    model = th.load_params(th.build_model(depth=3, width=8, seed=0), params)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, eps=epsilon)
    for x, y in batches:
        optimizer.zero_grad()
        F.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clipnorm)
        optimizer.step()
    with torch.no_grad():
        for p in model.parameters():
            p.grad = p.detach().clone()  # read the weights back through _torch_grads
    # Adam normalises each entry, so float32 rounding in a small gradient entry shows up at
    # the scale of the step (lr = 1e-2): the tolerance is 0.1% of a step.
    _assert_close_grads(stepped, _torch_grads(model), rtol=1e-4, atol=1e-5)
    moved = np.abs(stepped["kernel"] - params["kernel"]).max()
    assert moved > 1e-2  # the comparison is not of barely moved weights


def test_torch_build_model_init(th):
    import torch

    model = th.build_model(depth=3, width=8, transform_bias=-2.5, seed=0)
    model.requires_grad_(False)
    block = model.blocks[0]
    assert tuple(block.H.weight.shape) == (8, 8) and tuple(block.T.weight.shape) == (8, 8)
    assert float(block.T.bias.min()) == float(block.T.bias.max()) == -2.5
    assert float(block.H.bias.abs().max()) == 0 and float(model.stem.bias.abs().max()) == 0
    assert float(model.stem.weight.abs().max()) <= 1 / math.sqrt(784)
    assert float(block.H.weight.abs().max()) <= 1 / math.sqrt(8)
    same = th.build_model(depth=3, width=8, transform_bias=-2.5, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), same.parameters()))


def test_torch_trains_and_reports(th):
    data = _learnable_data()
    result = th.train(data, depth=3, epochs=3)
    _check_result(result, data, epochs=3)
    assert result["params"] == 784 * 50 + 50 + 3 * (50 * 100 + 100) + 50 * 10 + 10


# -- Keras ---------------------------------------------------------------------------------


def test_numpy_matches_keras_highway_stack():
    import keras
    import tensorflow as tf

    from layers import HighwayStack

    depth, width, transform_bias = 4, 8, -1.0
    params = nh.init_params(depth, width, transform_bias, seed=6)
    x, y = _batch(16)
    loss, grads = nh.loss_and_grads(params, x, y)

    stem = keras.layers.Dense(width, activation="tanh")
    stack = HighwayStack(depth, activation="tanh", transform_bias_initializer=transform_bias)
    head = keras.layers.Dense(10, activation="softmax")
    model = keras.Sequential([keras.Input((784,)), stem, stack, head])
    assert tuple(stack.kernel.shape) == (depth, width, 2 * width)
    assert tuple(stack.bias.shape) == (depth, 2 * width)
    stem.kernel.assign(params["stem_kernel"])
    stem.bias.assign(params["stem_bias"])
    stack.kernel.assign(params["kernel"])
    stack.bias.assign(params["bias"])
    head.kernel.assign(params["head_kernel"])
    head.bias.assign(params["head_bias"])
    variables = {
        "stem_kernel": stem.kernel, "stem_bias": stem.bias, "kernel": stack.kernel,
        "bias": stack.bias, "head_kernel": head.kernel, "head_bias": head.bias,
    }

    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    with tf.GradientTape() as tape:
        probabilities = model(x, training=True)
        keras_loss = loss_fn(y, probabilities)
    keras_grads = tape.gradient(keras_loss, [variables[key] for key in nh.PARAM_KEYS])
    keras_grads = {key: np.asarray(g) for key, g in zip(nh.PARAM_KEYS, keras_grads)}

    assert loss == pytest.approx(float(keras_loss), rel=1e-5)
    np.testing.assert_allclose(nh.forward(params, x), np.asarray(probabilities), rtol=1e-4,
                               atol=1e-6)
    _assert_close_grads(grads, keras_grads)

    # A few optimiser steps: NumPy's Adam with clipping against Keras's.
    batches = [_batch(16, seed=s) for s in range(4)]
    clipnorm = 0.4
    stepped, norms = _numpy_steps(params, batches, 1e-2, clipnorm)
    assert max(norms) > clipnorm > min(norms)
    optimizer = keras.optimizers.Adam(1e-2, epsilon=1e-7, global_clipnorm=clipnorm)
    trainable = [variables[key] for key in nh.PARAM_KEYS]
    for xb, yb in batches:
        with tf.GradientTape() as tape:
            step_loss = loss_fn(yb, model(xb, training=True))
        optimizer.apply_gradients(zip(tape.gradient(step_loss, trainable), trainable))
    keras_weights = {key: np.asarray(variables[key]) for key in nh.PARAM_KEYS}
    _assert_close_grads(stepped, keras_weights, rtol=1e-4, atol=1e-5)  # 0.1% of a step
