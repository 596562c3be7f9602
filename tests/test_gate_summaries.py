"""Tests of training.callbacks.GateSummaries: event files read back with TensorBoard's
EventAccumulator, gates.json, and the callback under a 2-replica MirroredStrategy."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import zoo
from layers.highway_stack import unstack_weights
from training.callbacks import GateSummaries, histogram_buckets, take_examples
from zoo.analysis import highway_layers
from zoo.analysis.gates import probe

REPO = Path(__file__).resolve().parent.parent


def read_events(log_dir):
    """{tag: [(step, value as NumPy)]} of every tensor summary under `log_dir`."""
    acc = event_accumulator.EventAccumulator(
        str(log_dir), size_guidance={event_accumulator.TENSORS: 0}
    )
    acc.Reload()
    return {
        tag: [(e.step, tf.make_ndarray(e.tensor_proto)) for e in acc.Tensors(tag)]
        for tag in acc.Tags()["tensors"]
    }


def direct_mean_t(model, x):
    io = probe(model)(x)
    return {layer.name: float(np.mean(layer.transform_gate(io[layer.name][0]).numpy()))
            for layer in highway_layers(model)}


def check_events(log_dir, layers, units, examples, mean_t, last_step):
    """The tags, steps and values every GateSummaries log must have."""
    events = read_events(log_dir)
    for name in layers:
        steps = [step for step, _ in events[f"mean_transform_gate/{name}"]]
        assert steps == list(range(last_step + 1))
        step, value = events[f"mean_transform_gate/{name}"][-1]
        assert value == pytest.approx(mean_t[name], rel=1e-5, abs=1e-6)
        _, hist = events[f"transform_gate/{name}"][-1]  # (buckets, [left, right, count])
        assert hist.shape[1] == 3 and hist[:, 2].sum() == examples * units
        assert hist[:, 0].min() >= 0.0 and hist[:, 1].max() <= 1.0
        _, bias_hist = events[f"transform_bias/{name}"][-1]
        assert bias_hist[:, 2].sum() == units
    (_, heat), *_ = events["gates/mean_T_heatmap"][-1:]
    width, height = (int(v) for v in heat[:2])  # image summaries: [width, height, png...]
    png = tf.io.decode_png(heat[2]).numpy()
    assert png.shape == (height, width, 3) == (4 * len(layers), 4 * units, 3)
    fig2 = events["gates/fig2"]
    assert [step for step, _ in fig2] == [last_step]  # once, when training ended
    return events


def test_summaries_every_epoch_with_fit_per_epoch_as_the_trainer_does(tmp_path):
    keras.utils.set_random_seed(0)
    model = zoo.load("highway_fc10_mnist", depth=4, width=6)
    model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (96, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, 96)
    held_out = tf.data.Dataset.from_tensor_slices((x[:40].astype(np.uint8), y[:40]))
    run_dir = tmp_path / "run"
    callback = GateSummaries(run_dir / "tensorboard", held_out, examples=32, final_epoch=2)
    for epoch in range(2):
        model.fit(x, y, batch_size=32, initial_epoch=epoch, epochs=epoch + 1,
                  callbacks=[callback], verbose=0)
    layers = [layer.name for layer in highway_layers(model)]
    mean_t = direct_mean_t(model, x[:32])
    check_events(run_dir / "tensorboard", layers, units=6, examples=32, mean_t=mean_t,
                 last_step=2)
    gates = json.loads((run_dir / "gates.json").read_text())
    assert gates["layers"] == layers and gates["units"] == [6] * 3 and gates["examples"] == 32
    assert [e["epoch"] for e in gates["epochs"]] == [0, 1, 2]
    np.testing.assert_allclose(gates["epochs"][-1]["mean_t"], [mean_t[n] for n in layers],
                               atol=2e-6)
    assert gates["epochs"][0]["transform_bias_mean"] == pytest.approx([-2.0] * 3)


def stacked_pair(depth=4, width=6):
    """A stacked FC net with gate biases that differ by layer, and the per-layer net with the
    same weights, both compiled with plain SGD (so they train alike)."""
    keras.utils.set_random_seed(0)
    stacked = zoo.load("highway_fc10_mnist", depth=depth, width=width, stacked=True)
    stack = stacked.get_layer("highway_stack")
    bias = keras.ops.convert_to_numpy(stack.bias)
    bias[:, width:] = -np.arange(1, depth)[:, None] + 0.2 * np.arange(width)[None]
    stack.bias.assign(bias)
    per_layer = zoo.load("highway_fc10_mnist", depth=depth, width=width)
    for name in ("stem_dense", "logits"):
        per_layer.get_layer(name).set_weights(stacked.get_layer(name).get_weights())
    for i, (kernel, b) in enumerate(unstack_weights(stack), start=1):
        per_layer.get_layer(f"highway_{i}").set_weights([kernel, b])
    for model in (stacked, per_layer):
        model.compile(keras.optimizers.SGD(0.05), "sparse_categorical_crossentropy")
    return stacked, per_layer


def test_a_stacked_net_gets_the_per_layer_nets_summaries(tmp_path):
    stacked, per_layer = stacked_pair()
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (64, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    for name, model in (("stacked", stacked), ("per_layer", per_layer)):
        callback = GateSummaries(tmp_path / name / "tensorboard", (x[:24], y[:24]), examples=24)
        model.fit(x, y, batch_size=32, epochs=2, shuffle=False, callbacks=[callback], verbose=0)
    layers = ["highway_1", "highway_2", "highway_3"]
    mean_t = direct_mean_t(per_layer, x[:24])
    assert list(mean_t) == layers
    got = check_events(tmp_path / "stacked" / "tensorboard", layers, units=6, examples=24,
                       mean_t=mean_t, last_step=2)
    expected = read_events(tmp_path / "per_layer" / "tensorboard")
    assert sorted(got) == sorted(expected)
    assert {tag.split("/")[0] for tag in got} == {
        "transform_gate", "mean_transform_gate", "transform_bias", "gates"}
    assert {tag.split("/", 1)[1] for tag in got if not tag.startswith("gates/")} == set(layers)
    for tag in got:
        assert [step for step, _ in got[tag]] == [step for step, _ in expected[tag]], tag
        if tag == "gates/fig2":
            continue  # a PNG of a matplotlib figure: compared by the numbers behind it
        for (_, mine), (_, theirs) in zip(got[tag], expected[tag]):
            if tag == "gates/mean_T_heatmap":
                mine, theirs = (tf.io.decode_png(v[2]).numpy().astype(int) for v in (mine,
                                                                                      theirs))
                assert np.abs(mine - theirs).max() <= 1, tag  # uint8 rounding
            else:
                np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-6, err_msg=tag)
    means = [got[f"mean_transform_gate/{name}"][0][1] for name in layers]
    assert np.all(np.diff(means) < 0)  # biases fall by layer: a mixed-up layer would show
    gates = {name: json.loads((tmp_path / name / "gates.json").read_text())
             for name in ("stacked", "per_layer")}
    assert gates["stacked"]["layers"] == layers
    assert {k: v for k, v in gates["stacked"].items() if k != "epochs"} == {
        k: v for k, v in gates["per_layer"].items() if k != "epochs"}
    for mine, theirs in zip(gates["stacked"]["epochs"], gates["per_layer"]["epochs"]):
        assert mine["epoch"] == theirs["epoch"]
        for key in ("mean_t", "std_t", "transform_bias_mean"):
            np.testing.assert_allclose(mine[key], theirs[key], rtol=1e-4, atol=2e-6)


def test_plain_nets_get_no_summaries(tmp_path):
    model = zoo.load("plain_fc10_mnist", depth=3, width=5)
    model.compile("adam", "sparse_categorical_crossentropy")
    x = np.zeros((8, 28, 28, 1), np.float32)
    callback = GateSummaries(tmp_path / "tensorboard", x)
    model.fit(x, np.zeros(8), epochs=1, callbacks=[callback], verbose=0)
    assert not (tmp_path / "gates.json").exists() and not (tmp_path / "tensorboard").exists()


def test_histogram_buckets_are_tensorboards_own():
    from tensorboard.plugins.histogram.summary_v2 import _buckets

    rng = np.random.default_rng(0)
    for values in (rng.random(1000), rng.normal(size=(7, 5)), np.full(4, 0.3), np.arange(2.0)):
        np.testing.assert_array_equal(
            histogram_buckets(values), _buckets(tf.constant(values), tf.constant(30)).numpy()
        )


def test_event_records_carry_tfrecords_checksums(tmp_path):
    """EventWriter frames its records itself, with google-crc32c's checksums: the same
    bytes as TensorBoard's pure-Python masked CRC-32C and TensorFlow's TFRecord reader."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as reference

    from training.summaries import EventWriter, masked_crc32c

    rng = np.random.default_rng(0)
    for size in (0, 1, 8, 31, 4096):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert masked_crc32c(data) == reference(data).to_bytes(4, "little"), size
    with EventWriter(tmp_path) as writer:
        writer.scalar("a", 0.25, step=1)
        writer.histogram("b", histogram_buckets(rng.random(100)), step=2)
    records = list(tf.data.TFRecordDataset(str(writer.path)))  # checks both checksums
    assert len(records) == 3  # the file version, the scalar, the histogram


def test_sample_batch_forms():
    x = np.zeros((10, 4, 4, 1), np.uint8)
    y = np.arange(10)
    for sample in (x, (x, y), tf.data.Dataset.from_tensor_slices((x, y)),
                   tf.data.Dataset.from_tensor_slices((x, y)).batch(3),
                   tf.data.Dataset.from_tensor_slices(x).batch(4)):
        images, labels = take_examples(sample, 7, input_rank=3)
        assert images.shape == (7, 4, 4, 1) and images.dtype == np.float32
        assert labels is None or labels.tolist() == list(range(7))
    with pytest.raises(ValueError, match="rank 3"):
        take_examples(np.zeros((4, 4)), 2, input_rank=3)
    with pytest.raises(ValueError, match="positive"):
        GateSummaries("logs", x, examples=0)


MIRRORED_SCRIPT = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, numpy as np
    import zoo
    from training.callbacks import GateSummaries
    from zoo.analysis import highway_layers
    from zoo.analysis.gates import probe

    run_dir, stacked = sys.argv[1], sys.argv[2] == "stacked"
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = zoo.load("highway_fc10_mnist", depth=4, width=6, stacked=stacked)
        model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (128, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, 128)
    callback = GateSummaries(run_dir + "/tensorboard", (x[:32], y[:32]))
    model.fit(x, y, batch_size=32, epochs=2, callbacks=[callback], verbose=0)
    if stacked:  # straight from the stack: T of every layer, (depth, batch, units)
        stack = model.get_layer("highway_stack")
        ts = stack.transform_gates(keras.Model(model.input, stack.input)(x[:32])).numpy()
        mean_t = {name: float(np.mean(t)) for name, t in zip(stack.layer_names(), ts)}
    else:
        io = probe(model)(x[:32])
        mean_t = {l.name: float(np.mean(l.transform_gate(io[l.name][0]).numpy()))
                  for l in highway_layers(model)}
    weights = model.get_layer("highway_stack" if stacked else "highway_1").kernel
    print(json.dumps({"replicas": strategy.num_replicas_in_sync,
                      "variable": type(weights.value).__name__, "mean_t": mean_t}))
""")


@pytest.mark.parametrize("form", ["per_layer", "stacked"])
def test_summaries_under_a_two_replica_mirrored_strategy(tmp_path, form):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"}
    run = subprocess.run([sys.executable, "-c", MIRRORED_SCRIPT, str(tmp_path), form],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["replicas"] == 2 and "Mirrored" in result["variable"]
    layers = list(result["mean_t"])
    assert layers == ["highway_1", "highway_2", "highway_3"]
    check_events(tmp_path / "tensorboard", layers, units=6, examples=32,
                 mean_t=result["mean_t"], last_step=2)
    gates = json.loads((tmp_path / "gates.json").read_text())
    assert [e["epoch"] for e in gates["epochs"]] == [0, 1, 2]
