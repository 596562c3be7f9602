"""Details of the papers' nets and recipes that no other test pins down: each assertion here
fails for a plausible slip (average for max pooling, 2x2 for 3x3 pools, one data order for
every epoch)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import zoo
from training.data.pipeline import training_batches


@pytest.mark.parametrize("name", ["highway_a_cifar10", "highway_b_cifar10", "highway_c_cifar10"])
def test_table_2_nets_pool_their_head_by_max(name):
    # NIPS 2015 §3.3.1: the Table 2 nets end in global max pooling and a fully connected layer.
    assert isinstance(zoo.load(name).get_layer("head_pool"), keras.layers.GlobalMaxPooling2D)


@pytest.mark.parametrize("name", ["highway_cifar10", "highway_cifar100"])
def test_table_3_nets_pool_their_head_by_average(name):
    assert isinstance(zoo.load(name).get_layer("head_pool"),
                      keras.layers.GlobalAveragePooling2D)


def test_the_mnist_conv_nets_pool_3_3_2_with_stride_2():
    # Table 1's MNIST net: 3x3/2, 3x3/2 and 2x2/2 max pools (Caffe's ceil mode: 24 -> 12 -> 6 -> 3).
    model = zoo.load("highway_conv16_mnist")
    pools = [model.get_layer(f"stage{s}_pool") for s in (1, 2, 3)]
    assert [p.pool_size for p in pools] == [(3, 3), (3, 3), (2, 2)]
    assert [p.strides for p in pools] == [(2, 2)] * 3
    assert [tuple(p.output.shape[1:3]) for p in pools] == [(12, 12), (6, 6), (3, 3)]


def test_every_epoch_has_its_own_data_order_and_each_is_repeatable():
    labels = np.arange(64) % 10
    split = tf.data.Dataset.from_tensor_slices((np.zeros((64, 2, 2, 1), np.uint8), labels))

    def order(epoch, seed=0):
        batches = training_batches(split, num_examples=64, batch_size=16, seed=seed, epoch=epoch)
        return np.concatenate([y.numpy() for _, y in batches])

    epochs = [order(e) for e in range(3)]
    assert sorted(epochs[0]) == sorted(labels)  # a permutation: nothing lost or repeated
    assert not np.array_equal(epochs[0], epochs[1])
    assert not np.array_equal(epochs[1], epochs[2])
    np.testing.assert_array_equal(order(1), epochs[1])  # a resumed run sees the same epoch
    assert not np.array_equal(order(1, seed=1), epochs[1])


def test_first_conv_stddev_starts_the_released_nets_first_conv_at_that_normal():
    """Caffe's Gaussian filler reads `std` (default 1), not the prototxt's `value: 0.05`."""
    keras.utils.set_random_seed(0)
    released = zoo.load("highway_cifar10", first_conv_stddev=1.0)
    keras.utils.set_random_seed(0)
    default = zoo.load("highway_cifar10")
    first = released.get_layer("stage1_conv").kernel.numpy()
    assert first.size == 3 * 3 * 3 * 32
    assert abs(first.std() - 1.0) < 0.07 and abs(first.mean()) < 0.1  # 864 draws
    # He-normal elsewhere, and by default: sqrt(2 / fan_in), fan_in 3 * 3 * 3.
    he = default.get_layer("stage1_conv").kernel.numpy().std()
    assert abs(he - np.sqrt(2 / 27)) < 0.02
    second = released.get_layer("stage2_conv").kernel.numpy().std()
    assert abs(second - np.sqrt(2 / (9 * 32))) < 0.005


@pytest.mark.parametrize("bad", [0, -1.0, "1"])
def test_first_conv_stddev_refuses_what_is_not_a_positive_number(bad):
    with pytest.raises(ValueError, match="first_conv_stddev must be a positive number"):
        zoo.load("highway_cifar10", first_conv_stddev=bad)
