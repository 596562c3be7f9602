"""The character-aware language models (Kim et al. 2016): counts, training, perplexity, resume,
the Table 1a study on a language model, and bad input."""

import argparse
import json
import math
import subprocess
import sys

import keras
import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

import zoo
from highway_zoo import cli
from layers import VARIANTS
from training.data.text import bptt_batches, load_corpus
from training.language_model import next_learning_rate, train_lm
from zoo.char_lm import set_trained_weights, trained_weights

SMALL = "lstm_char_small_ptb"
FAST = {"lstm_units": 24}  # the registered CNN and highway layers; a narrow LSTM
# Kim's optimiser on smaller batches (more updates per epoch of a tiny text), no rate decay:
# a plateau of 1 perplexity point means little at perplexities near 10.
SHORT = {"batch_size": 5, "bptt_steps": 10, "lr_plateau_decay": None}


def write_corpus(directory, lines=(700, 110, 110), seed=0):
    """A tiny corpus with structure to learn: determiner, adjective, noun, verb, determiner,
    noun; nouns and verbs agree in number."""
    rng = np.random.default_rng(seed)
    nouns = {"s": ["cat", "dog", "bird", "horse"], "p": ["cats", "dogs", "birds", "horses"]}
    verbs = {"s": ["sees", "likes", "chases"], "p": ["see", "like", "chase"]}
    directory.mkdir(parents=True, exist_ok=True)
    for name, n in zip(("train", "valid", "test"), lines):
        text = []
        for _ in range(n):
            number = "s" if rng.random() < 0.5 else "p"
            det = "a" if number == "s" else "some"
            adjective = rng.choice(["big", "small", "red", "old"])
            text.append(f"{det} {adjective} {rng.choice(nouns[number])} "
                        f"{rng.choice(verbs[number])} the {rng.choice(nouns['s'] + nouns['p'])}")
        (directory / f"{name}.txt").write_text("\n".join(text) + "\n", encoding="utf-8")
    return directory


def _kim_count(emb_vocab, filters, widths, highway_layers, branches, units, words):
    """Kim et al.'s layout counted by hand: character table, convolutions (kernel w x 15 x f
    plus f biases), highway layers (branches x (d^2 + d)), two LSTMs (4 gates x (inputs +
    units + 1) x units), softmax (units x words + words)."""
    d = sum(filters)
    cnn = sum(w * 15 * f + f for w, f in zip(widths, filters))
    lstm = 4 * units * (d + units + 1) + 4 * units * (units + units + 1)
    return emb_vocab * 15 + cnn + highway_layers * branches * (d * d + d) + lstm \
        + units * words + words


def test_registered_counts_by_formula_and_the_papers():
    large = _kim_count(51, (50, 100, 150, 200, 200, 200, 200), range(1, 8), 2, 2, 650, 10_000)
    small = _kim_count(51, (25, 50, 75, 100, 125, 150), range(1, 7), 1, 2, 300, 10_000)
    assert (large, small) == (19_367_965, 5_310_115)  # ../shared/specs §13, stock Keras layers
    for name, count, paper in ((SMALL, small, 5e6), ("lstm_char_large_ptb", large, 19e6)):
        assert zoo.describe(name)["params"] == count
        assert zoo.load(name).count_params() == count
        assert abs(count / paper - 1) < 0.07  # Kim et al.'s "5M" and "19M"
    # The training net's record counts parameters, not the LSTMs' carried states
    # (2 layers x h, c x 20 rows x 300 units more in count_params).
    stateful = zoo.load(SMALL, stateful=True, batch_size=20)
    assert stateful.count_params() == small + 2 * 2 * 20 * 300
    assert stateful.metadata["params"] == small


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_is_one_override_with_its_count(variant):
    from zoo.char_lm import parameter_count

    layers = 2 if variant == "residual" else 1
    model = zoo.load(SMALL, variant=variant, highway_layers=layers, classes=50, **FAST)
    branches = {"coupled": 2, "full": 3, "c_only": 2, "t_only": 2, "residual": 1, "plain": 1}
    expected = _kim_count(51, (25, 50, 75, 100, 125, 150), range(1, 7), layers,
                          branches[variant], 24, 50)
    assert model.count_params() == expected
    args = {**zoo.describe(SMALL)["architecture_args"], "variant": variant,
            "highway_layers": layers, "classes": 50, **FAST}
    assert parameter_count(**args) == expected
    embedder = model.get_layer("embedder")
    assert [h.variant for h in embedder.highways] == [variant] * layers


def test_include_top_false_gives_the_embedders_features():
    features = zoo.load(SMALL, include_top=False)
    chars = np.zeros((2, 5, 21), "int32")
    chars[:, :, :3] = [1, 7, 2]
    out = keras.ops.convert_to_numpy(features(chars))
    assert out.shape == (2, 5, 525) == (2, 5, *zoo.describe(SMALL)["features"]["shape"][1:])


def test_only_the_stateless_form_masks_padding_words():
    # The stateful form reads contiguous BPTT batches (no padding word): its LSTMs get no mask,
    # which is what lets Keras's JAX backend run them through cuDNN on a GPU.
    def lstm_masks(model):
        return [getattr(layer._inbound_nodes[0].input_tensors[0], "_keras_mask", None)
                is not None for layer in model.layers if layer.name.startswith("lstm_")]

    assert lstm_masks(zoo.load(SMALL, stateful=True, batch_size=2)) == [False, False]
    assert lstm_masks(zoo.load(SMALL)) == [True, True]


def test_pool_padding_is_an_override_and_a_train_flag():
    from highway_zoo.cli import train as train_cli

    model = zoo.load(SMALL, pool_padding=True)
    assert model.get_layer("embedder").pool_padding is True
    assert zoo.load(SMALL).get_layer("embedder").pool_padding is False
    parser = argparse.ArgumentParser()
    train_cli.add_override_flags(parser)
    assert train_cli.overrides(parser.parse_args(["--pool-padding"])) == {"pool_padding": True}
    assert train_cli.overrides(parser.parse_args([])) == {}


def test_kims_learning_rate_rule():
    recipe = {"lr_plateau_decay": 0.5, "lr_plateau_min_improvement": 1.0}
    # Epochs 1-2 never decay (main.lua checks from the third validation on); then a drop of
    # 5 keeps the rate, a drop of 0.5 halves it, a rise halves it.
    assert next_learning_rate(recipe, [300.0], 1.0) == 1.0
    assert next_learning_rate(recipe, [300.0, 299.9], 1.0) == 1.0
    assert next_learning_rate(recipe, [300.0, 200.0, 195.0], 1.0) == 1.0
    assert next_learning_rate(recipe, [300.0, 200.0, 199.5], 1.0) == 0.5
    assert next_learning_rate(recipe, [300.0, 200.0, 201.0], 0.5) == 0.25
    assert next_learning_rate({**recipe, "lr_plateau_decay": None}, [3.0, 2.0, 2.0], 1.0) == 1.0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    metrics = train_lm(SMALL, corpus, out=out, recipe="quick", epochs=3, seed=0, verbose=0,
                       recipe_overrides=SHORT, **FAST)
    return out, metrics


def test_short_training_lowers_validation_perplexity(trained, corpus):
    out, metrics = trained
    history = json.loads((out / "history.json").read_text())
    text = load_corpus(corpus)
    counts = np.bincount(text.train.words, minlength=len(text.words)) + 1.0
    unigram = math.exp(-np.mean(np.log((counts / counts.sum())[text.valid.words])))
    first, last = history[0]["val_perplexity"], history[-1]["val_perplexity"]
    # Learned the context: well below its first epoch and below the best context-free guess
    # (the training words' frequencies, add-one smoothed).
    assert last < first - 3 and last < 0.8 * unigram
    for entry in history:
        assert entry["perplexity"] == pytest.approx(math.exp(entry["loss"]), rel=1e-9)
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "finished" and run["recipe"]["name"] == "kim_char_lm_quick"
    assert json.loads((out / "metrics.json").read_text())["test_perplexity"] == \
        metrics["test_perplexity"]
    assert not (out / "checkpoint").exists()
    # TensorBoard's reader finds each epoch's perplexities, as history.json has them.
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    logged = [float(tensor_util.make_ndarray(e.tensor_proto))
              for e in events.Tensors("val_perplexity")]
    assert [e.step for e in events.Tensors("val_perplexity")] == [1, 2, 3]
    assert logged == pytest.approx([e["val_perplexity"] for e in history], rel=1e-6)


def test_a_run_writes_its_embedders_gates_each_epoch(trained, corpus):
    from test_token_gates import _numpy_gates

    from training.language_model import GATE_SAMPLE_WORDS

    out, _ = trained
    sample = load_corpus(corpus).valid.chars[:GATE_SAMPLE_WORDS]
    expected = _numpy_gates(zoo.load(str(out)), sample)  # the trained weights, in NumPy
    gates = json.loads((out / "gates.json").read_text())
    assert gates["layers"] == ["highway_1"] and gates["examples"] == len(sample)
    assert [e["epoch"] for e in gates["epochs"]] == [0, 1, 2, 3]  # 0: before training
    last = gates["epochs"][-1]
    assert last["mean_t"][0] == pytest.approx(expected.mean(), abs=2e-6)
    assert last["std_t"][0] == pytest.approx(expected.std(), abs=2e-6)
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    means = events.Tensors("mean_transform_gate/highway_1")
    assert [e.step for e in means] == [0, 1, 2, 3]
    assert float(tensor_util.make_ndarray(means[-1].tensor_proto)) == pytest.approx(
        expected.mean(), abs=2e-6)
    assert "gates/mean_T_heatmap" in events.Tags()["tensors"]


def _numpy_stream_loss(logits, targets):
    logits = logits - logits.max(axis=-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
    return float(-np.mean(np.take_along_axis(log_probs, targets[:, None], -1)))


def test_test_perplexity_reads_the_test_text_as_one_stream(trained, corpus, monkeypatch):
    """Kim's test perplexity: the test text from its start as one sequence, every token after
    the first predicted. Recomputed outside the trainer: the preset (stateless) fed the whole
    text in one call, softmax and cross-entropy in NumPy, exp of the mean."""
    from training import language_model

    out, metrics = trained
    preset = zoo.load(str(out))
    text = load_corpus(corpus, max_word_length=preset.metadata["input_shape"][1])
    logits = keras.ops.convert_to_numpy(preset(text.test.chars[None, :-1], training=False))[0]
    reference = _numpy_stream_loss(logits.astype(np.float64), text.test.words[1:])
    assert metrics["test_perplexity"] == pytest.approx(math.exp(reference), rel=1e-4)
    # Read in chunks of 64 steps, the states carried between them: the same number.
    monkeypatch.setattr(language_model, "STREAM_CHUNK", 64)
    settings = language_model.settle(SMALL, corpus, recipe="quick", recipe_overrides=SHORT,
                                     **FAST)
    assert len(text.test.words) > 3 * 64
    chunked = language_model.stream_loss(settings, preset.get_weights())
    assert chunked == pytest.approx(reference, rel=1e-5)
    # Cut into the training batches' 5 rows (each from a zero state), the number differs: the
    # check can fail.
    x, y = bptt_batches(text.test, 5, 10)
    stateful = zoo.load(SMALL, **{**preset.overrides, "stateful": True, "batch_size": 5})
    set_trained_weights(stateful, trained_weights(preset))
    rows = keras.ops.convert_to_numpy(stateful(x[:5], training=False))
    assert _numpy_stream_loss(rows.reshape(-1, rows.shape[-1]).astype(np.float64),
                              y[:5].reshape(-1)) != pytest.approx(reference, rel=1e-3)
    assert preset.metadata["classes"] == len(text.words)


RESUMED = dict(recipe="quick", epochs=3, seed=1, verbose=0, max_train_tokens=1500,
               recipe_overrides=SHORT, **FAST)


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "whole"
    return out, train_lm(SMALL, corpus, out=out, **RESUMED)


def _interrupted_after_second_epoch(corpus, out, monkeypatch):
    from training import language_model

    real = language_model._scalars

    def killed_after_second_epoch(directory, epoch, values):
        real(directory, epoch, values)
        if epoch == 1:
            raise KeyboardInterrupt  # after epoch 2's checkpoint and history

    with monkeypatch.context() as patched:
        patched.setattr(language_model, "_scalars", killed_after_second_epoch)
        with pytest.raises(KeyboardInterrupt):
            train_lm(SMALL, corpus, out=out, **RESUMED)
    assert json.loads((out / "run.json").read_text())["status"] == "running"


def _check_repeats(out, uninterrupted, resumed):
    whole_dir, whole = uninterrupted
    assert resumed["test_perplexity"] == whole["test_perplexity"]  # bit for bit
    a = json.loads((whole_dir / "history.json").read_text())
    b = json.loads((out / "history.json").read_text())
    for key in ("epoch", "loss", "val_loss", "val_perplexity", "learning_rate"):
        assert [e[key] for e in b] == [e[key] for e in a], key
    assert [e["epoch"] for e in b] == list(range(1, len(b) + 1))  # as image runs number them
    run = json.loads((out / "run.json").read_text())
    assert run["resumed"][0]["epoch"] == 2 and run["status"] == "finished"
    assert not (out / "checkpoint").exists()


def test_resume_after_interruption_repeats_the_uninterrupted_run(corpus, tmp_path, monkeypatch,
                                                                 uninterrupted):
    _interrupted_after_second_epoch(corpus, tmp_path / "split", monkeypatch)
    resumed = train_lm(SMALL, corpus, out=tmp_path / "split", **RESUMED)
    _check_repeats(tmp_path / "split", uninterrupted, resumed)


def _as_an_earlier_version_left_it(corpus, out):
    """The interrupted run's checkpoint in the layout of versions before the run core:
    `epoch-<k>.keras` (Keras's archive of the compiled stateful net and its optimizer after
    epoch k, 0-based) and latest.json (k, the next epoch's learning rate, the file)."""
    from training.checkpoints import Checkpoints
    from training.language_model import compiled_model, epoch_learning_rate, settle

    settings = settle(SMALL, corpus, **{k: v for k, v in RESUMED.items() if k != "verbose"})
    run = json.loads((out / "run.json").read_text())
    directory = out / "checkpoint"
    checkpoints = Checkpoints(directory, run["steps_per_epoch"])
    latest = checkpoints.latest()
    model = compiled_model(settings)
    checkpoints.restore(model, latest["iterations"])
    epoch = latest["epoch"] - 1
    model.save(directory / f"epoch-{epoch}.keras")
    history = json.loads((out / "history.json").read_text())[:epoch + 1]
    (directory / "latest.json").write_text(json.dumps({
        "epoch": epoch, "learning_rate": epoch_learning_rate(settings.recipe, history),
        "file": f"epoch-{epoch}.keras", "train_seconds": latest["train_seconds"]}))
    for path in [*directory.glob("ckpt-*.npz"), directory / "checkpoint.json"]:
        path.unlink()
    # and its history.json numbered the epochs from 0
    history = json.loads((out / "history.json").read_text())
    (out / "history.json").write_text(json.dumps(
        [{**entry, "epoch": entry["epoch"] - 1} for entry in history]))
    for key in ("distribution", "role", "checkpoint_every"):  # not recorded then
        run.pop(key)
    (out / "run.json").write_text(json.dumps(run))


def test_a_run_interrupted_by_an_earlier_version_resumes(corpus, tmp_path, monkeypatch,
                                                         uninterrupted):
    old = tmp_path / "old"
    _interrupted_after_second_epoch(corpus, old, monkeypatch)
    _as_an_earlier_version_left_it(corpus, old)
    assert sorted(p.name for p in (old / "checkpoint").iterdir()) == [
        "epoch-1.keras", "latest.json"]
    resumed = train_lm(SMALL, corpus, out=old, **RESUMED)
    _check_repeats(old, uninterrupted, resumed)

    # A damaged one is refused in one line, and kept.
    damaged = tmp_path / "damaged"
    _interrupted_after_second_epoch(corpus, damaged, monkeypatch)
    _as_an_earlier_version_left_it(corpus, damaged)
    (damaged / "checkpoint" / "epoch-1.keras").write_bytes(b"not a zip archive")
    with pytest.raises(OSError, match="an earlier version's checkpoint, cannot be resumed") \
            as refused:  # the command line's exit status 2
        train_lm(SMALL, corpus, out=damaged, **RESUMED)
    assert "\n" not in str(refused.value)
    assert sorted(p.name for p in (damaged / "checkpoint").iterdir()) == [
        "epoch-1.keras", "latest.json"]
    assert json.loads((damaged / "run.json").read_text())["status"] == "running"


def test_each_gated_skip_gets_the_highway_layers_closest_to_coupled_in_parameters():
    from training.experiments.lm_variants import highway_layers

    # Small: one coupled layer of d = 525 is 2·(d² + d) = 552,300 parameters. rezero,
    # layerscale and laurel_rw learn about d² + d each: two layers; laurel_lr d² + d + 2·d·65
    # = 344,400: two (688,800) beat one; gru_gate 7·d² + 2·d = 1,930,425: one (at least one).
    small = {v: highway_layers("lstm_char_small_ptb", v) for v in (
        "coupled", "residual", "plain", "rezero", "layerscale", "laurel_rw", "laurel_lr",
        "gru_gate")}
    assert small == {"coupled": 1, "residual": 2, "plain": 1, "rezero": 2, "layerscale": 2,
                     "laurel_rw": 2, "laurel_lr": 2, "gru_gate": 1}
    # Large: two coupled layers of d = 1,100 (4,844,400); laurel_lr's 1,100² + 1,100 +
    # 2·1,100·137 = 1,512,500 a layer: three (4,537,500) are closest.
    assert highway_layers("lstm_char_large_ptb", "laurel_lr") == 3
    assert highway_layers("lstm_char_large_ptb", "rezero") == 4


def test_the_papers_plain_is_one_plain_layer_of_large():
    """Greff et al.'s Plain row (92.60) is "a single plain layer" in LSTM-Char-Large, Kim et
    al.'s one-MLP-layer net: one ReLU layer of d = 1,100 (d² + d = 1,211,100 weights) in place
    of the two highway layers (2·2·(d² + d) = 4,844,400): 19,367,965 - 4,844,400 + 1,211,100
    = 15,734,665 parameters, where two plain layers would be 16,945,765."""
    from training.experiments.lm_variants import highway_layers
    from zoo.char_lm import parameter_count

    d = 1100
    layers = highway_layers("lstm_char_large_ptb", "plain")
    assert layers == 1 and highway_layers("lstm_char_small_ptb", "plain") == 1
    args = zoo.describe("lstm_char_large_ptb")["architecture_args"]
    expected = 19_367_965 - 2 * 2 * (d * d + d) + (d * d + d)
    assert expected == 15_734_665
    assert parameter_count(**{**args, "variant": "plain", "highway_layers": layers}) == expected
    model = zoo.load("lstm_char_large_ptb", variant="plain", highway_layers=layers)
    assert model.count_params() == expected


def test_lm_variants_study_end_to_end(corpus, tmp_path):
    from training.experiments.lm_variants import lm_variants_study

    out = tmp_path / "study"
    results = lm_variants_study(corpus, variants=("coupled", "residual"), seeds=1, epochs=1,
                                recipe="quick", checkpoint_every=7, out=out, isolate=False)
    by_variant = {r["variant"]: r for r in results["summary"]}
    for variant in ("coupled", "residual"):  # each run took the study's step checkpoints
        run = json.loads((out / f"{variant}_seed0" / "run.json").read_text())
        assert run["checkpoint_every"] == 7
    # Residual with twice the model's highway layers, as Greff et al. gave it 4 for 2.
    assert by_variant["residual"]["highway_layers"] == 2
    assert by_variant["coupled"]["highway_layers"] == 1
    for run in results["runs"]:
        metrics = json.loads((out / f"{run['variant']}_seed0" / "metrics.json").read_text())
        assert by_variant[run["variant"]]["test_perplexity"]["mean"] == \
            metrics["test_perplexity"]
        built = zoo.load(str(out / f"{run['variant']}_seed0"))
        assert run["params"] == built.count_params()
        # Gate summaries where the variant learns T: Coupled's, not Residual's.
        assert (out / f"{run['variant']}_seed0" / "gates.json").exists() == (
            run["variant"] == "coupled")
    table = (out / "table.md").read_text()
    assert "| residual | 2 |" in table and "91.32" in table
    assert (out / "perplexity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Run again (the step checkpoints are no setting): the finished runs are kept.
    again = lm_variants_study(corpus, variants=("coupled", "residual"), seeds=1, epochs=1,
                              recipe="quick", out=out, isolate=False)
    assert again["summary"] == results["summary"]

    # A study of a gated skip, matched like Residual (two layers for Small's one), merges with
    # it into one table; a study trained otherwise does not.
    skips = lm_variants_study(corpus, variants=("rezero",), seeds=1, epochs=1, recipe="quick",
                              out=tmp_path / "skips", isolate=False)
    assert skips["summary"][0]["highway_layers"] == 2
    assert cli.main(["variants", "--merge", str(out), str(tmp_path / "skips"), "--out",
                     str(tmp_path / "both")]) in (0, None)
    merged = json.loads((tmp_path / "both" / "results.json").read_text())
    assert [r["variant"] for r in merged["summary"]] == ["coupled", "residual", "rezero"]
    assert merged["summary"][2] == skips["summary"][0]
    assert "| rezero | 2 |" in (tmp_path / "both" / "table.md").read_text()
    longer = lm_variants_study(corpus, variants=("plain",), seeds=1, epochs=2, recipe="quick",
                               out=tmp_path / "longer", isolate=False)
    assert longer["settings"]["recipe"]["epochs"] == 2
    assert cli.main(["variants", "--merge", str(out), str(tmp_path / "longer"), "--out",
                     str(tmp_path / "refused")]) == 2
    assert not (tmp_path / "refused").exists()


def test_lm_variants_table_shows_spread_only_over_seeds():
    from training.experiments.lm_variants import variants_summary, variants_table

    def run(variant, seed, test, val):
        return {"variant": variant, "seed": seed, "params": 100, "test_perplexity": test,
                "val_perplexity": val, "final_train_perplexity": 50.0,
                "tokens_per_second": 1.0, "val_perplexity_curve": [val + 10, val],
                "overrides": {"highway_layers": 2 if variant == "residual" else 1}}

    runs = [run("full", 0, 93.10, 96.64), run("residual", 0, 107.33, 110.56),
            run("residual", 1, 105.33, 109.56)]
    table = variants_table(variants_summary(runs, ["full", "residual"]))
    # One seed: its value, no "± 0.0"; two: the mean and the population std (NumPy's).
    assert "| full | 1 | 100 | 1 | 96.64 | 93.10 | 79.09 |" in table
    std = np.std([107.33, 105.33])
    assert f"| residual | 2 | 100 | 2 | 110.1 ± 0.5 | 106.3 ± {std:.1f} | 91.32 |" in table


def test_bad_input_is_refused_before_anything_is_written(corpus, tmp_path):
    with pytest.raises(ValueError, match="line 2: the word .horses. has 6 characters"):
        train_lm(SMALL, corpus, out=tmp_path / "short", input_shape=(None, 5), verbose=0)
    with pytest.raises(FileNotFoundError):
        train_lm(SMALL, tmp_path / "nowhere", out=tmp_path / "none", verbose=0)
    with pytest.raises(ValueError, match="classes"):
        train_lm(SMALL, corpus, out=tmp_path / "classes", classes=7, verbose=0)
    assert not any(tmp_path.glob("short*")) and not (tmp_path / "none").exists() \
        and not (tmp_path / "classes").exists()


@pytest.mark.parametrize("argv, message", [
    (["train", SMALL], "--corpus DIR"),
    (["train", SMALL, "--corpus", "/nonexistent/corpus"], "/nonexistent/corpus"),
    (["train", "highway_fc10_mnist", "--corpus", "x"], "language models"),
])
def test_cli_refuses_in_one_line(argv, message, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "highway_zoo", *argv, "--out",
                           str(tmp_path / "run")], capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    # TensorFlow's own start-up notices aside (the train parser still imports Keras), one line.
    lines = [line for line in proc.stderr.splitlines() if line.startswith("highway-zoo")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr, \
        proc.stderr
    assert not (tmp_path / "run").exists()


def test_throughput_bench_compares_the_same_net(tmp_path):
    from benchmarks import language_model as bench

    result = bench.measure(SMALL, repeats=1, steps=3, batch=2, seq=4, lstm_units=8,
                           classes=40)
    # The stock and PyTorch nets are Kim's layout too: the same parameters (PyTorch's LSTM has
    # a second bias per gate), or run() refuses to compare.
    assert result["params"] == zoo.load(SMALL, lstm_units=8, classes=40).count_params()
    assert result["torch_params"] == result["params"] + 4 * 8 * 2
    for name in ("zoo", "stock", "torch"):
        assert result[f"{name}_tokens_per_second"] > 0
    assert result["ratio_zoo_over_torch"] == pytest.approx(
        result["zoo_runs"][0] / result["torch_runs"][0])


@pytest.mark.parametrize("argv, message", [
    (["--models", "highway_conv16_mnist"], "not a character-aware language model; choose "
                                           "from lstm_char_large_ptb"),
    (["--models", "lstm_char_tiny"], "Unknown model 'lstm_char_tiny'"),
    (["--backends", "tensorflow,theano"], "unknown backend(s) theano"),
    (["--steps", "2"], "--steps must be at least 3"),
    (["--repeats", "0"], "--repeats must be at least 1"),
])
def test_throughput_bench_refuses_bad_options_in_one_line(argv, message, tmp_path, capsys):
    from benchmarks import language_model as bench

    out = tmp_path / "lm.json"
    assert bench.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()
