"""The recipe of today (`cosine_cifar`): its schedule, label smoothing, the weight average
and the flip average, each against its closed form or NumPy; a run with it."""

import json

import keras
import numpy as np
import pytest

import zoo
from training.checkpoints import Checkpoints
from training.data import Dataset, Examples
from training.evaluation import flip_averaged_accuracy, flip_averaged_probabilities
from training.language_model import train_lm
from training.optimizers import CaffeSGD, SmoothedSparseCrossentropy, learning_rate, make_loss
from training.recipes import get_recipe
from training.trainer import train


def closed_form_rate(step, base, warmup, total):
    if step < warmup:
        return base * step / warmup
    return base * (1 + np.cos(np.pi * (step - warmup) / (total - warmup))) / 2


@pytest.mark.parametrize("warmup_epochs", [5, 0, 2.5])
def test_the_cosine_schedule_is_its_closed_form(warmup_epochs):
    recipe = get_recipe("cosine_cifar", {"warmup_epochs": warmup_epochs})
    steps_per_epoch = 391
    schedule = learning_rate(recipe, steps_per_epoch)
    total, warmup = 100 * steps_per_epoch, round(warmup_epochs * steps_per_epoch)
    steps = sorted({0, 1, 7, max(warmup - 1, 0), warmup, warmup + 1, 10_000, 20_000,
                    total - 2, total - 1, total})
    got = np.array([float(schedule(s)) for s in steps])
    want = np.array([closed_form_rate(s, 0.05, warmup, total) for s in steps])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-8)
    assert got.max() == pytest.approx(0.05) and got[-1] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("fields, message", [
    ({"lr_boundaries_epochs": [50]}, "lr_boundaries_epochs must be empty"),
    ({"lr_schedule": "multistep", "lr_boundaries_epochs": [50], "lr_decay": 0.1},
     "warmup_epochs must be 0 unless lr_schedule is cosine"),
    ({"warmup_epochs": 100}, "warmup_epochs must be fewer than the 100 epochs"),
    ({"warmup_epochs": -1}, "warmup_epochs must be a finite number >= 0"),
    ({"label_smoothing": 1.0}, "label_smoothing must be a finite number >= 0 and <= 0.999"),
    ({"ema_momentum": 1.0}, "ema_momentum must be a finite number > 0"),
    ({"optimizer": "adam"}, "ema_momentum must be none with optimizer adam"),
    ({"lr_schedule": "linear"}, "lr_schedule must be one of multistep, cosine"),
])
def test_bad_settings_of_the_recipe_of_today_are_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        get_recipe("cosine_cifar", fields)


def test_a_language_model_refuses_the_image_classifiers_fields(tmp_path):
    with pytest.raises(ValueError, match="label_smoothing apply to image classifiers"):
        train_lm("lstm_char_small_ptb", corpus=tmp_path, out=tmp_path / "run",
                 recipe_overrides={"label_smoothing": 0.1})
    assert not (tmp_path / "run").exists()


def test_the_smoothed_crossentropy_is_numpys():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(6, 5))
    probabilities = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    labels = rng.integers(0, 5, 6)
    for s in (0.0, 0.1, 0.3):
        target = np.full((6, 5), s / 5) + (1 - s) * np.eye(5)[labels]
        want = np.mean(-(target * np.log(probabilities)).sum(1))
        got = SmoothedSparseCrossentropy(s)(labels, probabilities.astype("float32"))
        assert float(got) == pytest.approx(want, rel=1e-5)
    assert isinstance(make_loss(get_recipe("caffe_cifar")),
                      keras.losses.SparseCategoricalCrossentropy)
    assert make_loss(get_recipe("cosine_cifar")).label_smoothing == 0.1


def _tiny_net(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4, 4, 1))
    x = keras.layers.Flatten()(inputs)
    outputs = keras.layers.Dense(3, activation="softmax", name="logits")(x)
    return keras.Model(inputs, outputs)


def test_the_weight_average_is_numpys_and_replaces_the_weights_only_when_asked():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(40, 4, 4, 1)).astype("float32"), rng.integers(0, 3, 40)
    model, momentum = _tiny_net(), 0.8
    model.compile(CaffeSGD(0.1, momentum=0.9, use_ema=True, ema_momentum=momentum),
                  "sparse_categorical_crossentropy")
    after_each_step = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            after_each_step.append([v.numpy().copy() for v in model.trainable_variables])

    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[Record()])
    average = after_each_step[0]  # the first step's weights, then the moving average
    for weights in after_each_step[1:]:
        average = [momentum * a + (1 - momentum) * w for a, w in zip(average, weights)]
    last = after_each_step[-1]
    # fit's end left the last step's weights (a run calls fit every epoch) ...
    for variable, want in zip(model.trainable_variables, last, strict=True):
        np.testing.assert_array_equal(variable.numpy(), want)
    # ... and the run's end puts the average in.
    model.optimizer.put_average_in(model.trainable_variables)
    for variable, want in zip(model.trainable_variables, average, strict=True):
        np.testing.assert_allclose(variable.numpy(), want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(average[0], last[0])


def test_a_checkpoint_carries_the_weight_average(tmp_path):
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(16, 4, 4, 1)).astype("float32"), rng.integers(0, 3, 16)

    def compiled(seed):
        model = _tiny_net(seed)
        model.compile(CaffeSGD(0.1, momentum=0.9, use_ema=True, ema_momentum=0.9),
                      "sparse_categorical_crossentropy")
        model.optimizer.build(model.trainable_variables)
        return model

    trained = compiled(0)
    trained.fit(x, y, batch_size=4, epochs=1, verbose=0)
    Checkpoints(tmp_path, steps_per_epoch=4).save(trained, 4)
    restored = compiled(5)
    Checkpoints(tmp_path, steps_per_epoch=4).restore(restored, 4)
    for model in (trained, restored):
        model.optimizer.put_average_in(model.trainable_variables)
    for a, b in zip(trained.trainable_variables, restored.trainable_variables, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_the_flip_average_is_numpys():
    model = _tiny_net(3)
    kernel, bias = (v.numpy() for v in model.get_layer("logits").weights)
    # Small pixel values: probabilities far from 0 and 1, so no two views tie.
    images = np.random.default_rng(3).integers(0, 5, (50, 4, 4, 1)).astype("uint8")

    def numpy_probabilities(batch):
        z = batch.reshape(len(batch), -1).astype(np.float64) @ kernel + bias
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    want = (numpy_probabilities(images) + numpy_probabilities(images[:, :, ::-1])) / 2
    np.testing.assert_allclose(flip_averaged_probabilities(model, images), want, rtol=1e-5)
    labels = np.random.default_rng(4).integers(0, 3, 50)
    accuracy = flip_averaged_accuracy(model, Examples(images, labels))
    assert accuracy == np.mean(want.argmax(1) == labels)
    # The mirror changes the answer for some images: the average is not the single view.
    assert np.any(numpy_probabilities(images).argmax(1) != want.argmax(1))


def _squares(n, seed):
    """28x28 images whose class is where a bright square sits, held in memory."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 40, (n, 28, 28, 1)).astype("uint8")
    for i, label in enumerate(labels):
        r, c = divmod(int(label), 5)
        images[i, 4 + 10 * r: 10 + 10 * r, 1 + 5 * c: 5 + 5 * c] = 250
    return Examples(images, labels.astype("int64"))


def test_a_run_of_the_recipe_of_today_in_bfloat16_names_its_policy_and_saves_the_average(
        tmp_path):
    data = Dataset(name="synthetic", train=_squares(256, 0), test=_squares(100, 1),
                   num_classes=10, image_shape=(28, 28, 1), num_train=256, num_test=100,
                   source="synthetic squares")
    run_dir = tmp_path / "run"
    metrics = train("highway_fc10_mnist", dataset=data, depth=3, recipe="cosine_cifar",
                    epochs=3, batch_size=32, out=run_dir, verbose=0, dtype="mixed_bfloat16",
                    recipe_overrides={"augmentation": "none", "warmup_epochs": 1,
                                      "learning_rate": 0.02})
    assert metrics["precision"] == "mixed_bfloat16"
    assert metrics["weights"].startswith("moving average of the weights, momentum 0.999")
    run = json.loads((run_dir / "run.json").read_text())
    assert run["overrides"]["dtype"] == "mixed_bfloat16"
    assert run["recipe"]["lr_schedule"] == "cosine" and run["recipe"]["ema_momentum"] == 0.999
    # The saved weights are the average the last test pass evaluated, and the flip average
    # is theirs.
    model = zoo.load("highway_fc10_mnist", weights=run_dir)
    probabilities = model.predict(data.test.images.astype("float32"), verbose=0)
    accuracy = np.mean(probabilities.argmax(1) == data.test.labels)
    assert accuracy == pytest.approx(metrics["test_accuracy"], abs=0.011)
    assert metrics["test_accuracy_flip_average"] == pytest.approx(
        flip_averaged_accuracy(model, data.test), abs=0.011)
