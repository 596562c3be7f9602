"""The papers' recipes: data against the spec, overrides, Caffe's weight decay and bias
learning rate, the networks' dropout and initialisers, and the CIFAR augmentation."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import zoo
from highway_zoo import cli
from layers import GlobalContrastNormalization
from training.data import Dataset, augment
from training.data.pipeline import evaluation_batches, training_batches
from training.optimizers import CaffeSGD, apply_weight_decay, learning_rate, make_optimizer
from training.recipes import (
    FIELD_DEFAULTS,
    FIELD_NAMES,
    FIELDS,
    INFO_KEYS,
    get_recipe,
    recipe_name,
    recipe_overrides,
)
from training.trainer import train
from zoo.recipes import RECIPES

# The Caffe solvers (spec §2, §3): iterations of batch 100 on the full training sets.
SOLVERS = {
    "caffe_mnist_conv": dict(images=60_000, lr=0.01, steps=[60_000, 120_000], max_iter=180_000,
                             augmentation="none"),
    "caffe_cifar": dict(images=50_000, lr=0.025, steps=[100_000, 150_000, 175_000],
                        max_iter=200_000, augmentation="pad_crop_flip"),
}


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_paper_recipes_are_the_caffe_solvers(name):
    solver, recipe = SOLVERS[name], get_recipe(name)
    steps_per_epoch = solver["images"] // recipe["batch_size"]
    assert recipe["batch_size"] == 100
    assert recipe["epochs"] * steps_per_epoch == solver["max_iter"]
    schedule = learning_rate(recipe, steps_per_epoch)
    values = [solver["lr"] * 0.1**i for i in range(len(solver["steps"]) + 1)]
    np.testing.assert_allclose(schedule.values, values)
    for i, step in enumerate(solver["steps"]):  # Caffe: iteration `step` (from 0) decayed
        assert float(schedule(step - 1)) == pytest.approx(values[i])
        assert float(schedule(step)) == pytest.approx(values[i + 1])
    optimizer = make_optimizer(recipe, steps_per_epoch)
    assert isinstance(optimizer, CaffeSGD)
    assert optimizer.nesterov and optimizer.momentum == 0.9 and optimizer.bias_lr_mult == 2
    assert optimizer.global_clipnorm is None
    # Caffe weight_decay 0.001 = L2(5e-4) on kernels; decay_mult 10 on the classifier.
    assert recipe["weight_decay"] == 1e-3 and recipe["classifier_weight_decay_mult"] == 10
    assert recipe["augmentation"] == solver["augmentation"]


def test_the_tenth_cifar_recipe_is_the_released_solver_at_a_tenth_of_its_schedule():
    paper, tenth = get_recipe("caffe_cifar"), get_recipe("caffe_cifar_tenth")
    steps_per_epoch = SOLVERS["caffe_cifar"]["images"] // tenth["batch_size"]
    # The solver's iterations, each a tenth: Caffe's steps 10k, 15k and 17.5k of 20k.
    assert tenth["epochs"] * steps_per_epoch * 10 == SOLVERS["caffe_cifar"]["max_iter"]
    schedule = learning_rate(tenth, steps_per_epoch)
    for i, step in enumerate(SOLVERS["caffe_cifar"]["steps"]):
        assert float(schedule(step // 10 - 1)) == pytest.approx(0.025 * 0.1**i)
        assert float(schedule(step // 10)) == pytest.approx(0.025 * 0.1**(i + 1))
    same = ("epochs", "lr_boundaries_epochs", "name", "source", "purpose", "paper_recipe")
    assert {k: v for k, v in tenth.items() if k not in same} == {
        k: v for k, v in paper.items() if k not in same}
    assert tenth["paper_recipe"] == "caffe_cifar" and "not the paper's" in tenth["purpose"]


def test_every_architecture_has_a_paper_recipe_and_a_quick_one():
    for name in zoo.list_models():
        paper = zoo.describe(name)["recipe"]
        assert recipe_name(paper, None) == recipe_name(paper, "paper") == paper
        quick = recipe_name(paper, "quick")
        assert quick != paper and RECIPES[quick]["paper_recipe"] == paper
        assert "CPU" in RECIPES[quick]["purpose"]
        assert get_recipe(quick)["epochs"] < get_recipe(paper)["epochs"]
    for name, recipe in RECIPES.items():
        # One schema for all: every training field (the language models' own ones may be
        # left out, FIELD_DEFAULTS fills them), plus descriptions only.
        required = set(FIELD_NAMES) - set(FIELD_DEFAULTS)
        assert required <= set(recipe) <= set(FIELD_NAMES) | set(INFO_KEYS), name
        # Usable as it is: the optimizer it names, starting at its learning rate.
        checked = get_recipe(name)
        optimizer = make_optimizer(checked, 10)
        assert isinstance(optimizer, {"sgd": CaffeSGD, "adam": keras.optimizers.Adam}[
            recipe["optimizer"]]), name
        # ... reaching its learning rate when its warm-up (if any) ends.
        schedule = learning_rate(checked, 10)
        warmup = round(checked["warmup_epochs"] * 10)
        start = schedule(warmup) if callable(schedule) else schedule
        assert float(start) == pytest.approx(recipe["learning_rate"], rel=1e-6), name
    with pytest.raises(ValueError, match="use 'paper', 'quick' or one of"):
        recipe_name("adam_fc", "fast")


def test_overrides_switching_optimizer_and_their_errors():
    recipe = get_recipe("caffe_cifar", {"optimizer": "adam", "learning_rate": 1e-3})
    # Settings of SGD that mean nothing to Adam are dropped, not silently kept.
    assert recipe["momentum"] is None and recipe["bias_lr_mult"] == 1
    assert isinstance(make_optimizer(recipe, 10), keras.optimizers.Adam)
    sgd = get_recipe("adam_fc", {"optimizer": "sgd", "global_clipnorm": None})
    assert sgd["momentum"] == 0.0 and sgd["nesterov"] is False and sgd["global_clipnorm"] is None
    assert get_recipe("adam_fc", epochs=None)["epochs"] == 12  # None = not given
    with pytest.raises(ValueError, match="bias_lr_mult must be 1 with Adam"):
        get_recipe("adam_fc", {"bias_lr_mult": 2.0})
    with pytest.raises(ValueError, match="lr_boundaries_epochs must be increasing"):
        get_recipe("caffe_cifar", {"lr_boundaries_epochs": [300, 200]})
    with pytest.raises(ValueError, match="'dropout' cannot be overridden"):
        get_recipe("caffe_cifar", {"dropout": 0.5})
    with pytest.raises(ValueError, match="augmentation must be one of none, pad_crop_flip"):
        get_recipe("caffe_cifar", {"augmentation": "cutout"})


def test_every_recipe_field_is_a_train_flag():
    args = cli.build_parser("train").parse_args([
        "train", "highway_cifar10", "--optimizer", "sgd", "--learning-rate", "0.1",
        "--momentum", "0.5", "--no-nesterov", "--lr-boundaries", "10,20", "--lr-decay", "0.5",
        "--batch-size", "50", "--epochs", "30", "--weight-decay", "0",
        "--classifier-weight-decay-mult", "1", "--bias-lr-mult", "1",
        "--global-clipnorm", "none", "--augmentation", "none", "--lr-plateau-decay", "0.5",
        "--lr-plateau-min-improvement", "2", "--bptt-steps", "35",
        "--lr-schedule", "multistep", "--warmup-epochs", "0", "--label-smoothing", "0.1",
        "--ema-momentum", "none",
    ])
    given = recipe_overrides(args)
    assert set(given) == set(FIELD_NAMES)  # one flag per field
    assert given["label_smoothing"] == 0.1 and given["ema_momentum"] is None
    assert given["lr_boundaries_epochs"] == [10, 20] and given["nesterov"] is False
    assert given["global_clipnorm"] is None  # "none" switches clipping off
    recipe = get_recipe("caffe_cifar", given)
    assert recipe["batch_size"] == 50 and recipe["momentum"] == 0.5
    # A flag not given keeps the recipe's value.
    untouched = cli.build_parser("train").parse_args(["train", "highway_cifar10"])
    assert recipe_overrides(untouched) == {}
    assert [f.option for f in FIELDS if f.name == "lr_boundaries_epochs"] == ["--lr-boundaries"]


def _images(n=6, shape=(28, 28, 1), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, *shape)).astype("float32"),
            rng.integers(0, 10, n).astype("int64"))


def test_weight_decay_is_caffes_l2_on_kernels_in_loss_and_gradient():
    keras.utils.set_random_seed(0)
    model = zoo.load("highway_conv16_mnist")
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy())
    x, y = _images()

    def loss_and_grads():
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x, y, model(x, training=False), training=False)
        return float(loss), dict(zip([v.path for v in model.trainable_variables],
                                     tape.gradient(loss, model.trainable_variables)))

    plain_loss, plain_grads = loss_and_grads()
    factors = apply_weight_decay(model, get_recipe("caffe_mnist_conv"))
    decayed_loss, decayed_grads = loss_and_grads()

    kernels = {v.path: v for v in model.trainable_variables if v.name == "kernel"}
    assert set(factors) == set(kernels) and len(kernels) == 10  # stem + 8 highway + logits
    assert factors["logits/kernel"] == pytest.approx(5e-3)  # x10
    assert [f for p, f in factors.items() if "logits" not in p] == pytest.approx([5e-4] * 9)
    penalty = sum(factors[p] * float(np.sum(np.square(v.numpy()))) for p, v in kernels.items())
    assert decayed_loss - plain_loss == pytest.approx(penalty, rel=1e-4)
    for path, variable in kernels.items():  # Caffe: wd * decay_mult * w added to the gradient
        np.testing.assert_allclose(
            decayed_grads[path] - plain_grads[path], 2 * factors[path] * variable.numpy(),
            rtol=1e-3, atol=1e-7,
        )
    for path in plain_grads:  # biases: decay_mult 0
        if path not in kernels:
            np.testing.assert_array_equal(decayed_grads[path], plain_grads[path])
    assert apply_weight_decay(zoo.load("highway_fc10_mnist"), get_recipe("adam_fc")) == {}


def test_bias_lr_mult_2_is_sgd_with_twice_the_learning_rate_on_biases():
    rng = np.random.default_rng(0)
    grads = [(rng.normal(size=(3, 2)), rng.normal(size=2)) for _ in range(6)]

    def schedule(scale):  # a schedule too: the multiplier applies to its current value
        return keras.optimizers.schedules.PiecewiseConstantDecay([3], [0.1 * scale, 0.01 * scale])

    def run(optimizer, names):
        variables = [keras.Variable(np.ones((3, 2)), name=names[0]),
                     keras.Variable(np.zeros(2), name=names[1])]
        for g in grads:
            optimizer.apply_gradients(zip([tf.constant(a, "float32") for a in g], variables))
        return [v.numpy() for v in variables]

    kernel, bias = run(CaffeSGD(schedule(1), 0.9, True, bias_lr_mult=2), ("kernel", "bias"))
    ref_kernel, _ = run(keras.optimizers.SGD(schedule(1), 0.9, True), ("kernel", "x"))
    _, ref_bias = run(keras.optimizers.SGD(schedule(2), 0.9, True), ("x", "y"))
    np.testing.assert_allclose(kernel, ref_kernel, rtol=1e-6)
    np.testing.assert_allclose(bias, ref_bias, rtol=1e-6)
    _, plain_bias = run(keras.optimizers.SGD(schedule(1), 0.9, True), ("x", "y"))
    assert not np.allclose(bias, plain_bias)
    restored = CaffeSGD.from_config(CaffeSGD(0.1, 0.9, bias_lr_mult=2).get_config())
    assert restored.bias_lr_mult == 2


def _following(model, name):
    """The name of the layer right after layer `name` (the nets are chains)."""
    names = [layer.name for layer in model.layers]
    return names[names.index(name) + 1]


CAFFE_XAVIER = {"scale": 2.0, "mode": "fan_in", "distribution": "untruncated_normal"}


def _check_caffe_xavier(initializer):
    assert isinstance(initializer, keras.initializers.VarianceScaling)
    assert {k: initializer.get_config()[k] for k in CAFFE_XAVIER} == CAFFE_XAVIER


def test_conv_nets_dropout_and_initialisers_follow_the_released_networks():
    # Spec §2: dropout 0.2 on the input pixels, 0.3 / 0.4 / 0.5 after the three pools.
    mnist = zoo.load("highway_conv32_mnist")
    dropout = {layer.name: layer.rate for layer in mnist.layers
               if isinstance(layer, keras.layers.Dropout)}
    assert dropout == {"input_dropout": 0.2, "stage1_dropout": 0.3, "stage2_dropout": 0.4,
                       "stage3_dropout": 0.5}
    assert _following(mnist, "rescale") == "input_dropout"
    assert _following(mnist, "input_dropout") == "stem_conv"
    for s in (1, 2, 3):
        assert _following(mnist, f"stage{s}_pool") == f"stage{s}_dropout"
    assert _following(mnist, "stage3_dropout") == "flatten"
    # Spec §3: 0.2 on the input, after both pools and after the global average pool.
    cifar = zoo.load("highway_cifar10")
    dropout = {layer.name: layer.rate for layer in cifar.layers
               if isinstance(layer, keras.layers.Dropout)}
    assert dropout == {"input_dropout": 0.2, "stage1_dropout": 0.2, "stage2_dropout": 0.2,
                       "head_dropout": 0.2}
    assert _following(cifar, "gcn") == "input_dropout"
    assert _following(cifar, "stage1_pool") == "stage1_dropout"
    assert _following(cifar, "stage2_pool") == "stage2_dropout"
    assert _following(cifar, "head_pool") == "head_dropout"
    assert _following(cifar, "head_dropout") == "logits"

    # Caffe's "xavier" in the authors' fork is He-normal without truncation.
    for model in (mnist, cifar):
        for layer in model.layers:
            if layer.name != "logits" and hasattr(layer, "kernel_initializer"):
                _check_caffe_xavier(layer.kernel_initializer)
    # The classifiers: N(0, 0.1^2) (MNIST), N(0, 0.05^2) (CIFAR-10), xavier (CIFAR-100).
    for model, stddev in ((mnist, 0.1), (cifar, 0.05)):
        logits = model.get_layer("logits")
        assert isinstance(logits.kernel_initializer, keras.initializers.RandomNormal)
        assert logits.kernel_initializer.stddev == stddev
        assert np.std(logits.kernel.numpy()) == pytest.approx(stddev, rel=0.1)
    _check_caffe_xavier(zoo.load("highway_cifar100").get_layer("logits").kernel_initializer)
    kernel = mnist.get_layer("stage1_highway1").kernel.numpy()  # fan_in 3*3*32
    assert np.std(kernel) == pytest.approx(np.sqrt(2 / (9 * 32)), rel=0.05)
    assert np.abs(kernel).max() > 2.5 * np.std(kernel)  # not truncated at 2 std


def _split(n=16, shape=(32, 32, 3)):
    x, y = _images(n, shape, seed=1)
    return x.astype("uint8"), tf.data.Dataset.from_tensor_slices((x.astype("uint8"), y))


def _collect(ds):
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in ds])
    return np.concatenate(xs), np.concatenate(ys)


def test_cifar_augmentation_pads_with_the_mean_crops_and_flips_in_training_only():
    images, split = _split()
    batches = dict(num_examples=16, batch_size=4, seed=3, epoch=0)
    augmented, _ = _collect(training_batches(split, augmentation="pad_crop_flip", **batches))
    assert augmented.shape == (16, 32, 32, 3) and augmented.dtype == np.float32
    assert augmented.min() >= 0 and augmented.max() <= 255
    originals = {im.tobytes() for im in images.astype("float32")}
    changed = [im.tobytes() not in originals for im in augmented]
    assert sum(changed) >= 12  # crops and flips move almost every image
    # Without augmentation: the same images, shuffled; the test split: exactly the input.
    plain, _ = _collect(training_batches(split, augmentation="none", **batches))
    assert sorted(im.tobytes() for im in plain) == sorted(originals)
    tested, _ = _collect(evaluation_batches(split, batch_size=5))
    np.testing.assert_array_equal(tested, images.astype("float32"))
    # Each epoch's draws depend on the seed and the epoch only (a resume sees the same).
    again, _ = _collect(training_batches(split, augmentation="pad_crop_flip", **batches))
    np.testing.assert_array_equal(again, augmented)
    other, _ = _collect(training_batches(split, augmentation="pad_crop_flip",
                                         **{**batches, "epoch": 1}))
    assert not np.array_equal(other, augmented)
    # The padding is the image's mean, which the model's GCN turns into zero.
    padded = augment.pad_with_mean(images[0])
    assert padded.shape == (48, 48, 3)
    np.testing.assert_array_equal(padded[8:40, 8:40], images[0].astype("float32"))
    gcn = GlobalContrastNormalization()(padded[None])[0].numpy()
    assert np.abs(gcn[:8]).max() < 1e-5 and np.abs(gcn[:, -8:]).max() < 1e-5


def test_the_paper_cifar_recipe_runs_whole_and_is_recorded(tmp_path):
    """Weight decay, the bias multiplier and the augmentation inside a real fit."""
    _, train_split = _split(200)
    _, test_split = _split(100)
    data = Dataset("synthetic_cifar", train_split, test_split, 10, (32, 32, 3), 200, 100,
                   "random pixels")
    metrics = train("highway_a_cifar10", dataset=data, epochs=1, out=tmp_path / "run",
                    verbose=0)
    assert metrics["iterations"] == 2 and np.isfinite(metrics["final_train_loss"])
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["recipe"]["name"] == "caffe_cifar"
    assert run["recipe"]["augmentation"] == "pad_crop_flip"
    assert run["bias_lr_mult"] == {"value": 2.0, "biases": 11}  # 3 convs, 6 highway, 2 dense
    assert len(run["weight_decay_l2"]) == 11
    assert run["weight_decay_l2"]["logits/kernel"] == pytest.approx(5e-3)
    assert run["metadata"]["name"] == "highway_a_cifar10"
