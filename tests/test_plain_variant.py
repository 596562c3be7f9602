"""variant="plain" (y = H(x), Greff et al. 2017's Plain) in whole nets: the same function as the
registered plain_* nets, and no gates where analyses, summaries and the export look for them.
(The layer itself is tested against NumPy in test_layers.py, its stack against the per-layer
chain in test_highway_stack.py, with every other variant.)"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import zoo
from training.callbacks import GateSummaries
from zoo.analysis import analyze, highway_layers


def _plain_highway_net(stacked):
    return zoo.load("highway_fc10_mnist", depth=4, width=71, variant="plain", stacked=stacked)


@pytest.mark.parametrize("stacked", [False, True])
def test_a_plain_variant_net_is_the_registered_plain_net(stacked):
    """Same parameter count as plain_fc (71 units) and, with its weights, the same outputs."""
    keras.utils.set_random_seed(0)
    plain = zoo.load("plain_fc10_mnist", depth=4)
    net = _plain_highway_net(stacked)
    assert net.count_params() == plain.count_params()
    dense = [plain.get_layer(f"plain_{i}").get_weights() for i in range(1, 4)]
    for name in ("stem_dense", "logits"):
        net.get_layer(name).set_weights(plain.get_layer(name).get_weights())
    if stacked:
        net.get_layer("highway_stack").set_weights(
            [np.stack([k for k, _ in dense]), np.stack([b for _, b in dense])])
    else:
        for i, weights in enumerate(dense, start=1):
            net.get_layer(f"highway_{i}").set_weights(weights)
    x = np.random.default_rng(0).integers(0, 256, (6, 28, 28, 1)).astype("float32")
    np.testing.assert_allclose(net(x), plain(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stacked", [False, True])
def test_gate_analyses_refuse_a_net_without_gates(tmp_path, stacked):
    net = _plain_highway_net(stacked)
    assert highway_layers(net) == []
    x = np.zeros((4, 28, 28, 1), np.float32)
    with pytest.raises(ValueError, match=r"variant 'plain' \(y = H\(x\)\), which has no gates"):
        analyze(net, x, np.zeros(4, np.int64), tmp_path / "analysis")
    assert not (tmp_path / "analysis" / "analysis.json").exists()


def test_no_gate_summaries_and_no_gates_signature(tmp_path):
    net = _plain_highway_net(stacked=True)
    net.compile("adam", "sparse_categorical_crossentropy")
    x = np.zeros((8, 28, 28, 1), np.float32)
    callback = GateSummaries(tmp_path / "run" / "tensorboard", x)
    net.fit(x, np.zeros(8), epochs=1, callbacks=[callback], verbose=0)
    assert not (tmp_path / "run" / "gates.json").exists()
    assert not (tmp_path / "run" / "tensorboard").exists()

    directory = zoo.export(net, base_dir=tmp_path / "exported", name="plain_stack", warmup=False)
    loaded = tf.saved_model.load(str(directory))
    # No "gates": a plain net has none (classify names MNIST's digits, from the metadata).
    assert sorted(loaded.signatures) == ["classify", "logits", "serving_default"]
    served = loaded.signatures["serving_default"](pixels=tf.constant(x[:2]))["probabilities"]
    np.testing.assert_allclose(served, net(x[:2]), rtol=1e-5, atol=1e-6)
