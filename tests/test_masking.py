"""Keras masking through the layers of layers/, on every backend (issue 26, deliverable 1).

Each layer does with a mask what its Keras counterpart does: HighwayDense and HighwayStack (all
fast paths) as `Dense`, CaffeImageNetPreprocessing as `Normalization`, GlobalContrastNormalization
as `BatchNormalization` (statistics of the unmasked positions), CharCNNEmbedder computes its word
mask; HighwayConv2D and BNHighwayBlock, as `Conv2D`, support none. `check_masking`
(tests/layer_test_helper.py) runs each case here on TensorFlow in this process and on JAX and
PyTorch in subprocesses (`run_on_backend`, marked `backends`, as tests/test_backends.py does).
"""

import functools
import traceback
import warnings

import keras
import numpy as np
import pytest
from layer_test_helper import character_ids, check_masking

import layers
from layers import (
    BNHighwayBlock,
    CaffeImageNetPreprocessing,
    CharCNNEmbedder,
    GlobalContrastNormalization,
    HighwayConv2D,
    HighwayDense,
    HighwayStack,
)


def _lesioned_stack():
    stack = HighwayStack(3)
    stack.lesioned_layers = {1}  # the keras.ops.scan path
    return stack


def _stack_without_hand_written_backward():
    stack = HighwayStack(3)
    stack.hand_written_backward = False  # autodiff through the backend's loop
    return stack


# name: keyword arguments of check_masking. Every variant; HighwayStack through each of its
# paths (the backend's fast path with the written-out backward pass, autodiff through its loop,
# TensorFlow's loop of chunks plus a written-out rest, the lesioned scan).
MASKING_CASES = {
    **{f"dense_{variant}": dict(make_layer=functools.partial(HighwayDense, variant=variant),
                                input_shape=(2, 5, 6))
       for variant in layers.VARIANTS},
    "stack_coupled_tanh_chunks": dict(make_layer=lambda: HighwayStack(5, unroll=2),
                                      input_shape=(2, 5, 6)),
    "stack_full_relu": dict(make_layer=lambda: HighwayStack(3, activation="relu", variant="full"),
                            input_shape=(2, 5, 6)),
    "stack_plain_elu": dict(make_layer=lambda: HighwayStack(3, activation="elu", variant="plain"),
                            input_shape=(2, 5, 6)),
    "stack_autodiff": dict(make_layer=_stack_without_hand_written_backward,
                           input_shape=(2, 5, 6)),
    "stack_lesioned": dict(make_layer=_lesioned_stack, input_shape=(2, 5, 6)),
    "gcn": dict(make_layer=GlobalContrastNormalization, input_shape=(2, 5, 6)),
    "caffe_preprocessing": dict(make_layer=CaffeImageNetPreprocessing, input_shape=(2, 5, 3)),
    "char_cnn_embedder": dict(
        make_layer=lambda: CharCNNEmbedder(char_vocab_size=9, char_embedding_dim=3,
                                           filters=(2, 3), kernel_sizes=(1, 2)),
        input_shape=(2, 5, 4), make_input=character_ids, fronts=(None, "masking")),
}
# On JAX and PyTorch, where every input shape compiles (JAX) and a case costs some 10-20 s: each
# layer and each of the stack's paths there (the written-out backward pass, autodiff through the
# loop, the lesioned scan), behind one front each, the two fronts taking turns.
OTHER_BACKEND_CASES = {
    "dense_coupled": ("embedding",),
    "stack_full_relu": ("masking",),
    "stack_plain_elu": ("embedding",),
    "stack_lesioned": ("masking",),
    "gcn": ("embedding",),
    "caffe_preprocessing": ("masking",),
    "char_cnn_embedder": (None,),
}
# Public layers that, as keras.layers.Conv2D, support no masking.
WITHOUT_MASKING = {HighwayConv2D: lambda: HighwayConv2D(3),
                   BNHighwayBlock: lambda: BNHighwayBlock(4)}


def test_every_public_layer_is_checked():
    # A layer exported from layers/ must have a masking case, or be one that supports none.
    public = {getattr(layers, name) for name in layers.__all__
              if isinstance(getattr(layers, name), type)}
    made = [case["make_layer"]() for case in MASKING_CASES.values()]
    assert public - {type(layer) for layer in made} - set(WITHOUT_MASKING) == set()
    assert all(layer.supports_masking for layer in made)
    on_other_backends = {type(MASKING_CASES[name]["make_layer"]()) for name in OTHER_BACKEND_CASES}
    assert on_other_backends == {type(layer) for layer in made}
    for cls, make_layer in WITHOUT_MASKING.items():
        assert make_layer().supports_masking is False, cls.__name__


@pytest.mark.parametrize("case", MASKING_CASES)
def test_masking_on_tensorflow(case):
    check_masking(**MASKING_CASES[case])


def masking_on_this_backend(out):
    """The cases of OTHER_BACKEND_CASES on this process's backend: OUT[case] is "" where it
    passed, the failure's text where not."""
    warnings.simplefilter("ignore")
    for name, fronts in OTHER_BACKEND_CASES.items():
        try:
            check_masking(**{**MASKING_CASES[name], "fronts": fronts})
            out[name] = ""
        except Exception:
            out[name] = traceback.format_exc()[-3000:]


@pytest.mark.backends
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_masking_on_other_backends(backend, tmp_path, subtests):
    """The cases of OTHER_BACKEND_CASES on JAX / PyTorch (the stack's fast path of each): the
    mask passes on, padding changes no unmasked output, LSTM output or weight gradient."""
    from test_backends import run_on_backend

    out = run_on_backend(backend, """
        import test_masking
        test_masking.masking_on_this_backend(OUT)
    """, tmp_path, timeout=600)
    assert set(out) == set(OTHER_BACKEND_CASES)
    for name in OTHER_BACKEND_CASES:
        with subtests.test(msg=name):
            assert str(out[name]) == "", f"{backend} {name}:\n{out[name]}"


# The report, as a user meets it -----------------------------------------------------------


@pytest.mark.parametrize("make_layer", [HighwayDense, lambda: HighwayStack(2)],
                         ids=["dense", "stack"])
def test_after_an_embedding_the_mask_is_kept_without_a_warning(make_layer):
    # Issue 26: Keras warned these layers "will destroy the mask", and an LSTM after them gave
    # different results for padded and unpadded input (as a Dense in their place does not).
    keras.utils.set_random_seed(0)
    ids = np.array([[3, 1, 4, 1, 5, 0, 0], [2, 7, 1, 0, 0, 0, 0]], "int32")
    inputs = keras.Input((None,), dtype="int32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = keras.layers.Embedding(10, 8, mask_zero=True)(inputs)
        x = make_layer()(x)
        model = keras.Model(inputs, keras.layers.LSTM(5)(x))
        padded = keras.ops.convert_to_numpy(model(ids))
    assert not [w for w in caught if "destroy the mask" in str(w.message)]
    for row, length in zip(range(2), (5, 3)):
        alone = keras.ops.convert_to_numpy(model(ids[row:row + 1, :length]))
        np.testing.assert_allclose(padded[row], alone[0], rtol=1e-5, atol=1e-6)


def test_highway_layers_pass_the_mask_on_unchanged():
    x = np.zeros((2, 4, 3), "float32")
    mask = np.array([[True, True, False, True], [False, False, False, False]])
    for layer in (HighwayDense(), HighwayStack(2), GlobalContrastNormalization(),
                  CaffeImageNetPreprocessing()):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(layer.compute_mask(x, mask)), mask)


# GlobalContrastNormalization: the statistics of the unmasked positions ----------------------------


def _masked_gcn(x, mask, epsilon=1e-8):
    """NumPy reference: per example, mean and variance of the unmasked positions' values."""
    out = np.empty_like(x, dtype=np.float64)
    for i in range(len(x)):
        kept = x[i][mask[i]].astype(np.float64)  # (positions, features)
        mean, var = kept.mean(), kept.var()
        out[i] = (x[i] - mean) / np.sqrt(var + epsilon)
    return out


@pytest.mark.parametrize("shape", [(3, 6, 4), (2, 5, 5, 3)], ids=["sequence", "image"])
def test_gcn_with_a_mask_matches_numpy(shape):
    rng = np.random.default_rng(7)
    x = rng.uniform(0, 255, size=shape).astype("float32")
    mask = rng.random(shape[:-1]) < 0.6
    mask.reshape(len(x), -1)[:, 0] = True  # at least one position per example
    y = keras.ops.convert_to_numpy(GlobalContrastNormalization()(x, mask=mask))
    expected = _masked_gcn(x, mask)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    # Statistics of the kept positions: zero mean, unit variance there (not over everything).
    for i in range(len(x)):
        np.testing.assert_allclose(y[i][mask[i]].mean(), 0.0, atol=1e-4)
        np.testing.assert_allclose(y[i][mask[i]].std(), 1.0, rtol=1e-4)
    unmasked = keras.ops.convert_to_numpy(GlobalContrastNormalization()(x))
    assert not np.allclose(unmasked, y, atol=1e-3)


def test_gcn_with_a_mask_under_mixed_precision():
    rng = np.random.default_rng(8)
    x = rng.uniform(0, 255, size=(2, 6, 4)).astype("float32")
    mask = np.array([[True] * 4 + [False] * 2, [True] * 6])
    y = GlobalContrastNormalization(dtype="mixed_float16")(x, mask=mask)
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(y), _masked_gcn(x, mask),
                               rtol=1e-2, atol=1e-2)


def test_gcn_padding_holding_nan_does_not_leak_in():
    x = np.random.default_rng(9).normal(size=(2, 4, 3)).astype("float32")
    mask = np.array([[True, True, True, False], [True, True, False, False]])
    x[~mask] = np.nan
    y = keras.ops.convert_to_numpy(GlobalContrastNormalization()(x, mask=mask))
    assert np.all(np.isfinite(y[mask]))
    np.testing.assert_allclose(y[mask], _masked_gcn(x, mask)[mask], rtol=1e-4, atol=1e-5)


def test_gcn_an_example_with_nothing_unmasked_stays_finite():
    x = np.random.default_rng(10).normal(size=(2, 3, 2)).astype("float32")
    mask = np.array([[True, True, False], [False, False, False]])
    y = keras.ops.convert_to_numpy(GlobalContrastNormalization()(x, mask=mask))
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y[1], x[1] / np.sqrt(1e-8), rtol=1e-5)  # mean 0, variance 0


def test_gcn_refuses_a_mask_of_the_wrong_rank():
    x = np.zeros((2, 3, 4), "float32")
    with pytest.raises(ValueError, match=r"one dimension less.*mask.shape=\(2, 3, 4\)"):
        GlobalContrastNormalization()(x, mask=np.ones((2, 3, 4), bool))
