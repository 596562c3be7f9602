"""The named gated-skip models (issue 31): ReZero and LayerScale versions of the 50-layer FC
net and a ReZero version of Kim's Small language model. Their parameter counts by formula
(`layers.variants.parameter_count`) against the registry and the built model, their skips'
initialisation as their papers give it, a forward pass, and the metadata and cards that say
where each part comes from and what no paper has."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import site_pages  # docs/_hooks/

import zoo
from layers import HighwayDense
from layers.variants import parameter_count
from zoo import char_lm, registry

FC = {"rezero_fc50_mnist": ("rezero", 71), "layerscale_fc50_mnist": ("layerscale", 70)}
FC_ALL = {**FC, **{n.replace("_mnist", "_fashion_mnist"): v for n, v in FC.items()}}
LM = "lstm_char_small_rezero_ptb"
ARXIV = {"rezero": "2003.04887", "layerscale": "2103.17239"}


def _fc_params(variant: str, width: int, depth: int = 50) -> int:
    """Stem Dense 784 -> width, depth - 1 hidden layers by the variants' formula, softmax 10."""
    return (784 * width + width + (depth - 1) * parameter_count(variant, width)
            + width * 10 + 10)


def test_the_names_are_registered_beside_the_nets_they_change():
    assert zoo.list_models("*_fc50_mnist") == [
        "highway_fc50_mnist", "layerscale_fc50_mnist", "plain_fc50_mnist", "rezero_fc50_mnist"]
    assert zoo.list_models("lstm_char_small*") == ["lstm_char_small_ptb", LM]
    # every *_mnist net has a Fashion-MNIST twin (zoo/fc_nets/ and zoo/conv_nets/ presets.json)
    assert set(FC_ALL) <= set(zoo.list_models())


@pytest.mark.parametrize("name", sorted(FC_ALL))
def test_fc_counts_by_formula_are_the_registrys_and_the_built_models(name):
    variant, width = FC_ALL[name]
    meta = zoo.describe(name)
    assert meta["params"] == _fc_params(variant, width)
    # the width matches a coupled highway layer of 50 units (5,100 parameters), as the
    # variants study's matched width does
    from training.experiments.variants import matched_width

    assert width == matched_width(variant)
    model = zoo.load(name)
    assert model.count_params() == meta["params"]
    hidden = [layer for layer in model.layers if isinstance(layer, HighwayDense)]
    assert len(hidden) == 49 and {layer.variant for layer in hidden} == {variant}
    assert all(layer.count_params() == parameter_count(variant, width) for layer in hidden)
    probs = keras.ops.convert_to_numpy(model(np.random.default_rng(0).uniform(
        0, 255, (3, 28, 28, 1)).astype("float32"), training=False))
    assert probs.shape == (3, 10)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_the_hand_counts():
    # 784·71 + 71 + 49·(71² + 71 + 1) + 71·10 + 10; 784·70 + 70 + 49·(70² + 2·70) + 710
    assert zoo.describe("rezero_fc50_mnist")["params"] == 55_735 + 49 * 5_113 + 720 == 306_992
    assert zoo.describe("layerscale_fc50_mnist")["params"] == 54_950 + 49 * 5_040 + 710 \
        == 302_620
    # one parameter per layer more than the 71-unit plain net
    assert 306_992 - zoo.describe("plain_fc50_mnist")["params"] == 49


def test_the_skips_start_as_their_papers_say():
    rezero = zoo.load("rezero_fc50_mnist")
    hidden = [layer for layer in rezero.layers if isinstance(layer, HighwayDense)]
    assert all(float(keras.ops.convert_to_numpy(layer.alpha)) == 0.0 for layer in hidden)
    # a = 0: every hidden layer passes its input on, so the last one's output is the stem's
    x = np.random.default_rng(1).uniform(0, 255, (2, 28, 28, 1)).astype("float32")
    probe = keras.Model(rezero.inputs[0], [rezero.get_layer("stem_dense").output,
                                        rezero.get_layer("highway_49").output])
    stem, last = (keras.ops.convert_to_numpy(t) for t in probe(x))
    np.testing.assert_array_equal(last, stem)
    layerscale = zoo.load("layerscale_fc50_mnist")
    scales = [keras.ops.convert_to_numpy(layer.layer_scale) for layer in layerscale.layers
              if isinstance(layer, HighwayDense)]
    assert len(scales) == 49 and all(s.shape == (70,) and np.all(s == np.float32(1e-5))
                                     for s in scales)
    assert zoo.describe("layerscale_fc50_mnist")["architecture_args"]["layerscale_init"] == 1e-5


def test_the_stacked_form_has_the_same_count():
    assert zoo.load("layerscale_fc50_mnist", stacked=True).count_params() == 302_620


def test_the_language_models_count_by_formula_and_its_forward_pass():
    meta = zoo.describe(LM)
    args = meta["architecture_args"]
    assert args["variant"] == "rezero" and args["highway_layers"] == 1
    assert meta["params"] == char_lm.parameter_count(**args) == 5_033_966
    # Kim's Small net less its coupled highway layer (2·(525² + 525)) plus a ReZero one
    small = zoo.describe("lstm_char_small_ptb")["params"]
    assert meta["params"] == small - parameter_count("coupled", 525) + (
        parameter_count("rezero", 525)) == small - 2 * (525**2 + 525) + 525**2 + 525 + 1
    model = zoo.load(LM, input_shape=(4, 21))
    assert model.count_params() == meta["params"]
    layer = model.get_layer("embedder").highways[0]
    assert layer.variant == "rezero" and float(keras.ops.convert_to_numpy(layer.alpha)) == 0
    ids = np.random.default_rng(0).integers(1, 51, (2, 4, 21)).astype("int32")
    logits = keras.ops.convert_to_numpy(model(ids, training=False))
    assert logits.shape == (2, 4, 10_000) and np.all(np.isfinite(logits))


@pytest.mark.parametrize("name", [*sorted(FC_ALL), LM])
def test_describe_says_where_each_part_comes_from(name):
    meta = zoo.describe(name)
    skip = meta["gated_skip"]
    form = skip["form"]
    assert form == meta["architecture_args"]["variant"]
    assert skip["arxiv"] == ARXIV[form] and f"arXiv {ARXIV[form]}" in meta["paper"]
    assert ("Bachlechner" if form == "rezero" else "Touvron") in skip["paper"]
    assert skip["initialisation"].startswith("a = 0" if form == "rezero" else "every l = 1e-5")
    assert meta["provenance"] == "COMBINED" and "COMBINED" in registry.PROVENANCE
    assert "this zoo's combination: no paper trains it" in meta["not_in_any_paper"]
    assert meta["params_formula"] and meta["default_transform_bias"] is None
    # the paper of the net, too: the 2015 paper's Fig. 1 net, or Kim et al.'s
    assert ("Kim, Jernite" if name == LM else "Srivastava et al. 2015") in meta["paper"]
    assert not any(v for k, v in meta.items() if k.startswith("paper_") and k not in (
        "paper_metric",)), "no paper reports a number for these nets"
    # The MNIST nets ship weights; the others say why they do not: PTB's training text is
    # not on these machines, the Fashion-MNIST runs took longer than the issue had
    if name in FC:
        assert meta["pretrained"]["file"] == f"{name}.{meta['pretrained_tag']}.weights.h5"
    else:
        assert meta["pretrained"] is None
        assert ("80 minutes" if name == LM else "18 minutes") in meta["weights_note"]


@pytest.mark.parametrize("name", ["rezero_fc50_mnist", "layerscale_fc50_fashion_mnist", LM])
def test_the_card_shows_the_form_its_paper_and_what_no_paper_has(name):
    meta = zoo.describe(name)
    card = site_pages.model_card(meta)
    if meta["pretrained"] is None:
        # the card speaks of the model: the registry's note on why it ships none is left out
        assert "ships without weights" in card and meta["weights_note"] not in card
    arxiv = meta["gated_skip"]["arxiv"]
    assert "### The skip form" in card and f"(https://arxiv.org/abs/{arxiv})" in card
    assert "**What no paper has:**" in card and "**Provenance:** `COMBINED`" in card
    assert f"| parameters by formula | {meta['params_formula']} |" in card
    assert meta["gated_skip"]["initialisation"] in card
    bib = "bachlechner2021rezero" if meta["gated_skip"]["form"] == "rezero" else (
        "touvron2021cait")
    net = "kim2016character" if name == LM else "srivastava2015training"
    assert f"@inproceedings{{{bib}," in card and f"@inproceedings{{{net}," in card


def test_the_tuner_searches_no_transform_bias_where_there_is_no_gate():
    from training.tuning.hypermodel import is_highway

    assert is_highway("highway_fc50_mnist") and is_highway("lstm_char_small_ptb")
    assert not any(is_highway(n) for n in ["plain_fc50_mnist", *FC, LM])


def test_a_gated_skip_net_turned_back_into_a_highway_net_needs_its_gate_bias():
    with pytest.raises(ValueError, match=r"has a transform gate: pass its initial bias"):
        zoo.load("rezero_fc50_mnist", variant="coupled", depth=3)
    model = zoo.load("rezero_fc50_mnist", variant="coupled", transform_bias=-1.0, depth=3)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model.get_layer("highway_1").transform_bias), -1.0)
