"""The rest of the zoo for the language models (issue 26): `describe`, presets of a trained
run, `include_top=False`, fine-tuning, and the SavedModel that takes words.

One tiny run of `train_lm` (a 600-token corpus, one epoch, an LSTM of 8) is shared; the
export is checked against the Keras model fed the spelling of the Python reader
(`training.data.text`), a path independent of the graph's own spelling."""

import json
import math
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2
from test_char_lm import SMALL, write_corpus

import zoo
from highway_zoo import cli
from highway_zoo.cli import main
from training.data.text import EOS, UNK, load_corpus
from training.language_model import train_lm
from zoo.char_lm import trained_weights

TINY = {"lstm_units": 8}
QUICK = {"batch_size": 4, "bptt_steps": 8, "lr_plateau_decay": None}
SENTENCES = [["a", "big", "cat", "sees", "the", "dogs"],
             ["some", "old", "hide", EOS, UNK, "a"]]  # "hide": not a word of the corpus


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"), lines=(100, 30, 30))


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    train_lm(SMALL, corpus, out=out, recipe="quick", epochs=1, seed=0, verbose=0,
             tensorboard=False, recipe_overrides=QUICK, **TINY)
    return out


def reader_chars(corpus, model, sentences=SENTENCES):
    """The sentences spelled by the Python reader, as training spelled them."""
    text = load_corpus(corpus, max_word_length=model.inputs[0].shape[-1])
    return np.stack([[text.spell(word) for word in row] for row in sentences])


def softmax(logits):
    return keras.ops.convert_to_numpy(keras.ops.softmax(logits, axis=-1))


# --- describe -----------------------------------------------------------------------------


def test_describe_shows_the_papers_numbers_and_the_features_per_word(capsys):
    info = zoo.describe(SMALL)
    assert info["family"] == "char_lm" and info["params"] == 5_310_115
    assert info["paper_perplexity"] == 92.3 and info["paper_params"] == "5M"
    assert zoo.describe("lstm_char_large_ptb")["paper_variant_perplexity"]["t_only"] == 82.94
    assert info["features"]["shape"] == [None, 525]
    assert "per word" in info["features"]["description"]
    assert "(batch, steps, 525)" in info["features"]["description"]
    assert main(["describe", SMALL]) == 0
    shown = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert shown["params"] == "5310115" and shown["paper_perplexity"] == "92.3"
    assert "perplexity" in shown["paper_metric"]
    assert main(["describe", SMALL, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["paper_perplexity"] == 92.3


# --- presets ------------------------------------------------------------------------------


def test_a_trained_run_loads_as_a_preset_with_the_same_outputs(run, corpus, tmp_path):
    model = zoo.load(str(run))
    record = json.loads((run / "model.json").read_text())
    assert model.vocabulary == record["vocabulary"]
    assert model.vocabulary["words"] == list(load_corpus(corpus).words)
    x = reader_chars(corpus, model)
    expected = keras.ops.convert_to_numpy(model(x))
    # By name with the run's weights, and saved again (vocabulary kept) and loaded.
    by_name = zoo.load(SMALL, weights=str(run))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(by_name(x)), expected)
    zoo.save(model, tmp_path / "again")
    again = zoo.load(str(tmp_path / "again"))
    assert again.vocabulary == model.vocabulary
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(again(x)), expected)
    # The run's test perplexity is the preset's metric, on its card in perplexity terms.
    card = (run / "README.md").read_text()
    assert "| test perplexity |" in card and "raw pixel" not in card
    assert "tuner objective" not in card and "character ids" in card
    assert f"{len(model.vocabulary['words'])} words" in card


# --- include_top=False ----------------------------------------------------------------------


def test_include_top_false_is_the_embedders_output(run, corpus):
    model = zoo.load(str(run))
    features = zoo.load(str(run), include_top=False)
    x = reader_chars(corpus, model)
    out = keras.ops.convert_to_numpy(features(x))
    assert out.shape == (2, 6, 525)
    embedder = keras.Model(model.inputs[0], model.get_layer("embedder").output)
    np.testing.assert_array_equal(out, keras.ops.convert_to_numpy(embedder(x)))
    assert [w.name for w in features.weights] == [w.name for w in embedder.weights]


# --- fine-tuning --------------------------------------------------------------------------


def test_fine_tuning_goes_on_from_the_run_on_another_text(run, corpus, tmp_path):
    """Another text of the same words, read with the run's ids: training starts from the
    run's weights (stateful, as train_lm trains) and ends with a preset like the run's."""
    from training.language_model import compiled_model, settle

    other = write_corpus(tmp_path / "other", lines=(100, 30, 30), seed=5)
    assert load_corpus(other).words != load_corpus(corpus).words  # other ids on its own
    base = zoo.load(str(run))
    settings = settle(SMALL, other, weights=str(run), recipe="quick", recipe_overrides=QUICK)
    assert settings.corpus.words == tuple(base.vocabulary["words"])
    start = compiled_model(settings)
    assert [layer.stateful for layer in start.layers if "lstm" in layer.name] == [True, True]
    for a, b in zip(trained_weights(start), base.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)

    out = tmp_path / "tuned"
    train_lm(SMALL, other, out=out, weights=str(run), recipe="quick", epochs=1, seed=0,
             verbose=0, tensorboard=False, recipe_overrides=QUICK)
    tuned = zoo.load(str(out))
    assert tuned.vocabulary == base.vocabulary and tuned.overrides == base.overrides
    assert not np.array_equal(tuned.get_layer("logits").get_weights()[0],
                              base.get_layer("logits").get_weights()[0])  # it trained
    record = json.loads((out / "run.json").read_text())["initial_weights"]
    assert record["source"] == str(run.resolve())
    assert record["sha256"] == json.loads((run / "model.json").read_text())["sha256"]


def test_fine_tuning_refuses_what_would_not_fit(run, tmp_path):
    (tmp_path / "odd").mkdir()
    for split in ("train", "valid", "test"):
        (tmp_path / "odd" / f"{split}.txt").write_text("a zebra\n" * 50)
    with pytest.raises(ValueError, match="'z' are not in the model's character vocabulary"):
        train_lm(SMALL, tmp_path / "odd", out=tmp_path / "a", weights=str(run), verbose=0)
    with pytest.raises(ValueError, match="lstm_units cannot change"):
        train_lm(SMALL, tmp_path / "odd", out=tmp_path / "b", weights=str(run), verbose=0,
                 lstm_units=16)
    with pytest.raises(ValueError, match="not 'lstm_char_large_ptb'"):
        train_lm("lstm_char_large_ptb", tmp_path / "odd", out=tmp_path / "c",
                 weights=str(run), verbose=0)
    assert not any((tmp_path / d).exists() for d in "abc")


# --- export -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    base = tmp_path_factory.mktemp("exported")
    path = zoo.export(SMALL, base_dir=base, weights=str(run))
    return path, tf.saved_model.load(str(path))


def test_the_saved_model_takes_words_and_returns_the_next_words_probabilities(
        run, corpus, exported):
    path, loaded = exported
    model = zoo.load(str(run))
    expected = softmax(model(reader_chars(corpus, model)))
    fn = loaded.signatures["serving_default"]
    assert fn.structured_input_signature[1]["words"].dtype == tf.string
    out = {k: v.numpy() for k, v in fn(words=tf.constant(SENTENCES)).items()}
    np.testing.assert_allclose(out["probabilities"], expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(out["probabilities"].sum(-1), 1.0, atol=1e-5)
    # The top words are the vocabulary's most probable, in order, with their probabilities.
    words = np.array(model.vocabulary["words"])
    best = np.argsort(-expected, axis=-1, kind="stable")[..., :5]
    assert out["top_words"].shape == (2, 6, 5)
    np.testing.assert_array_equal(out["top_words"].astype(str), words[best])
    np.testing.assert_allclose(out["top_probabilities"],
                               np.take_along_axis(expected, best, -1), atol=1e-5)
    logits = loaded.signatures["logits"](words=tf.constant(SENTENCES))["logits"].numpy()
    np.testing.assert_allclose(logits, keras.ops.convert_to_numpy(
        model(reader_chars(corpus, model))), atol=1e-4, rtol=1e-5)
    record = json.loads((path / "assets.extra" / "highway_zoo.json").read_text())
    assert record["input"]["name"] == "words" and record["input"]["dtype"] == "string"
    assert record["input"]["vocabulary"]["words"] == len(words)


def test_the_saved_model_refuses_what_the_reader_refuses(exported):
    _, loaded = exported
    fn = loaded.signatures["serving_default"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="not in the character vocabulary"):
        fn(words=tf.constant([["a", "zebra"]]))  # no 'z' in the corpus
    with pytest.raises(tf.errors.InvalidArgumentError, match="more than 6 characters"):
        fn(words=tf.constant([["a", "chaseschases"]]))
    # '{' and '}' are removed, as the reader removes them from the text.
    np.testing.assert_array_equal(fn(words=tf.constant([["{a}", "cat"]]))["probabilities"],
                                  fn(words=tf.constant([["a", "cat"]]))["probabilities"])


def test_warmup_requests_run(exported):
    path, loaded = exported
    records = list(tf.data.TFRecordDataset(str(path / "assets.extra" /
                                               "tf_serving_warmup_requests")))
    seen = []
    for record in records:
        request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
        seen.append(request.model_spec.signature_name)
        inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
        outputs = loaded.signatures[request.model_spec.signature_name](**inputs)
        assert all(v.shape[:2] == (1, 1) for v in outputs.values())
    assert sorted(seen) == ["logits", "serving_default"]


def test_cli_exports_a_run_directory_and_predicts_next_words(run, tmp_path, capsys):
    base = tmp_path / "exported"
    assert main(["export", str(run), "--base-dir", str(base), "--no-warmup"]) == 0
    version = base / SMALL / "1"
    assert str(version) in capsys.readouterr().out
    assert main(["predict", "--model-dir", str(version), "a", "big", "--top", "2"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("a big -> ") and len(line.split(", ")) == 2
    loaded = tf.saved_model.load(str(version))
    top = loaded.signatures["serving_default"](words=tf.constant([["a", "big"]]))["top_words"]
    assert line.split(" -> ")[1].split(":")[0] == top.numpy()[0, -1, 0].decode()
    # Words the signature refuses (a character outside the vocabulary, a word too long for
    # the reader): one line that names the word, exit 2, no traceback.
    width = zoo.load(str(run)).inputs[0].shape[-1]
    for words, said in ((["a", "Big"], "not in the character vocabulary of this model (it "
                                       "spells words with these characters: +abc"),
                        (["a", "b" * width], f"more than {width - 2} characters"),
                        (["a", "Don't"], "): Don't. Give")):  # as typed, not C-escaped
        assert main(["predict", "--model-dir", str(version), *words]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and "lower case" in err[0], err
        assert "these characters: +abc" in err[0] or "shorter word, or '<unk>' for it:" in err[0]


def test_exporting_a_language_model_without_vocabulary_is_refused_in_one_line(tmp_path):
    with pytest.raises(ValueError, match="no vocabulary"):
        zoo.export(SMALL, base_dir=tmp_path / "a", random_weights=True, lstm_units=8)
    proc = subprocess.run(
        [sys.executable, "-m", "highway_zoo", "export", SMALL, "--random-weights",
         "--base-dir", str(tmp_path / "b")], capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("highway-zoo")]
    assert len(lines) == 1 and "no vocabulary" in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "b" / SMALL).exists()


def test_a_language_model_exports_to_saved_model_only(run, tmp_path):
    with pytest.raises(ValueError, match="SavedModel only"):
        zoo.export(str(run), base_dir=tmp_path, format="tflite")


def test_perplexity_from_the_saved_model_is_the_runs(run, corpus, exported):
    """The served probabilities of each test word after its prefix give the run's test
    perplexity (read as one text from its start, the stateless model's way: the run's own
    number comes from contiguous batches, so the two agree only roughly)."""
    _, loaded = exported
    text = load_corpus(corpus)
    words = [text.words[i] for i in text.test.words[:200]]
    probabilities = loaded.signatures["serving_default"](
        words=tf.constant([words]))["probabilities"].numpy()[0]
    targets = text.test.words[1:200]
    served = math.exp(-np.mean(np.log(probabilities[np.arange(199), targets])))
    recorded = json.loads((run / "metrics.json").read_text())["test_perplexity"]
    assert served == pytest.approx(recorded, rel=0.25)


def test_the_saved_model_needs_no_project_code(exported, tmp_path):
    """What TF Serving gets: loaded in a fresh process outside the repository, words in."""
    path, loaded = exported
    expected = loaded.signatures["serving_default"](words=tf.constant(SENTENCES))
    np.save(tmp_path / "expected.npy", expected["probabilities"].numpy())
    script = tmp_path / "serve.py"
    script.write_text(
        "import sys\nimport numpy as np\nimport tensorflow as tf\n"
        f"fn = tf.saved_model.load({str(path)!r}).signatures['serving_default']\n"
        f"out = fn(words=tf.constant({SENTENCES!r}))['probabilities'].numpy()\n"
        f"np.testing.assert_array_equal(out, np.load({str(tmp_path / 'expected.npy')!r}))\n"
        "assert not {'zoo', 'layers', 'training'} & set(sys.modules), sys.modules\n"
        "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]


# --- generation ---------------------------------------------------------------------------


def test_greedy_generation_is_the_argmax_of_the_words_signature(run, exported):
    """Each greedy word is the saved model's most probable next word after the sentence start
    (<eos>), the prompt and the words written so far: the states carried step by step give what
    the signature computes on the whole text."""
    _, loaded = exported
    model = zoo.load(str(run))
    text = model.generate("a big", max_length=8, stop_token=None)
    words = text.split()
    assert words[:2] == ["a", "big"] and len(words) == 8
    fn = loaded.signatures["serving_default"]
    for i in range(2, 8):
        top = fn(words=tf.constant([[EOS, *words[:i]]]))["top_words"].numpy()[0, -1, 0]
        assert top.decode() == words[i], (i, words)


def test_top_k_sampling_is_reproducible_for_a_seed_and_draws_from_the_top_k(run):
    model = zoo.load(str(run))
    write = {"max_length": 12, "sampler": "top_k", "stop_token": None}
    texts = {seed: model.generate("some old", k=5, seed=seed, **write) for seed in range(4)}
    assert model.generate("some old", k=5, seed=2, **write) == texts[2]
    assert len(set(texts.values())) > 1  # the seed draws
    # k=1 leaves one candidate: the greedy text.
    assert model.generate("some old", k=1, seed=9, **write) == \
        model.generate("some old", max_length=12, stop_token=None)
    # A batch of prompts: a text per prompt, one seeded stream drawn in order.
    assert model.generate(["a", "some"], k=5, seed=3, **write) == [
        model.generate(["a", "some"], k=5, seed=3, **write)[0],
        model.generate(["a", "some"], k=5, seed=3, **write)[1]]


def test_generation_stops_where_the_net_writes_the_stop_token(run):
    model = zoo.load(str(run))
    words = model.generate("a big", max_length=10, stop_token=None).split()
    stop = words[4]  # the third word written
    before = words[:words.index(stop, 2)]
    assert model.generate("a big", max_length=10, stop_token=stop) == " ".join(before)
    assert model.generate("a big cat", max_length=2) == "a big cat"  # at least the prompt


@pytest.mark.parametrize("bad, message", [
    ({"sampler": "beam"}, "sampler must be one of greedy, top_k"),
    ({"max_length": 0}, "max_length must be a positive integer"),
    ({"sampler": "top_k", "k": 0}, "k must be a positive integer"),
    ({"stop_token": "zebra"}, "stop_token 'zebra' is not a word of this model"),
])
def test_generation_refuses_bad_arguments_in_one_line(run, bad, message):
    model = zoo.load(str(run))
    with pytest.raises(ValueError, match=message):
        model.generate("a big", **bad)
    with pytest.raises(ValueError, match="has no tokenizer"):
        zoo.load(SMALL, **TINY).generate("a big")


# --- shipping -----------------------------------------------------------------------------


@pytest.fixture
def package(tmp_path, monkeypatch):
    """The language models' family folder (its presets, SMALL's without weights yet, an empty
    weights folder) as a directory of the test's, and a short reference sentence: the run
    shipped is SMALL's first weights, its default."""
    from training.experiments import pretrain
    from zoo import pretrained, registry

    presets = tmp_path / "char_lm" / "presets.json"
    (tmp_path / "char_lm" / "weights").mkdir(parents=True)
    found = registry.read_presets(registry.preset_file(SMALL))
    del found[SMALL]["weights"]
    presets.write_text(registry.presets_text(found), encoding="utf-8")
    for name in zoo.list_models("lstm_char_*"):
        monkeypatch.setitem(registry._PRESET_FILES, name, presets)
    monkeypatch.setattr(pretrained, "CACHE_SUBDIR", str(tmp_path / "cache"))
    pretrained.index.cache_clear()
    monkeypatch.setattr(pretrain, "REFERENCE_SENTENCE", "a big")
    monkeypatch.setattr(pretrain, "EXAMPLES", [
        {"prompt": "a big", "max_length": 6, "sampler": "greedy"},
        {"prompt": "some", "max_length": 6, "sampler": "top_k", "k": 3, "seed": 0}])
    try:
        yield tmp_path / "char_lm"
    finally:
        pretrained.index.cache_clear()


def test_a_shipped_run_loads_by_name_with_its_vocabulary(run, corpus, tmp_path, package):
    """`pretrain --run NAME RUN` into a package directory of the test's: the file
    and vocabulary hash-checked, weights="default" gives the run's net, vocabulary and next
    words, and the model card's texts are written again the same."""
    from training.experiments import pretrain
    from zoo import pretrained

    assert cli.main(["pretrain", "--run", SMALL, str(run)]) == 0
    entry = pretrained.index()[SMALL]
    tag = pretrained.default_tag(SMALL)  # the run's recipe, corpus and precision
    assert tag == pretrain.run_tag(json.loads((run / "run.json").read_text()))
    assert tag.startswith("kim_char_lm_quick.") and tag.endswith(".f32")
    assert entry["file"] == f"{SMALL}.{tag}.weights.h5"
    assert entry["vocabulary"]["file"] == f"{SMALL}.{tag}.vocabulary.json"
    shipped = zoo.load(SMALL, weights="default")
    preset = zoo.load(str(run))
    assert shipped.vocabulary == preset.vocabulary
    for a, b in zip(shipped.get_weights(), preset.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert pretrain.next_words(shipped, "a big") == entry["reference"]["next_words"]
    for example in entry["examples"]:
        arguments = {k: v for k, v in example.items() if k != "text"}
        assert shipped.generate(**arguments) == example["text"]
    # The record names the corpus by its files' sha256s, not by this machine's directory.
    assert "source" not in entry["dataset"] and str(corpus) not in json.dumps(entry)
    assert entry["dataset"]["sha256"] == json.loads((run / "run.json").read_text())[
        "dataset"]["sha256"]
    assert entry["command"].startswith(f"highway-zoo train {SMALL} --corpus PTB_DIR "
                                       "--recipe kim_char_lm_quick --seed 0")
    # A changed byte in the vocabulary is refused (its sha256), as for the weights.
    vocabulary = package / "weights" / entry["vocabulary"]["file"]
    vocabulary.write_text(vocabulary.read_text().replace('"cat"', '"cap"'))
    for cached in (tmp_path / "cache").iterdir():
        cached.unlink()
    with pytest.raises(ValueError, match="hash"):
        zoo.load(SMALL, weights="default")


def test_float16_shipping_halves_the_file_and_measures_the_stored_weights_again(
        run, corpus, package, capsys):
    """`--float16`: every array stored as float16, loading as the run's weights rounded to
    float16, and the test perplexity measured on those (the run's own kept beside it)."""
    import h5py

    from training.experiments.pretrain import next_words
    from training.language_model import perplexity, settle, stream_loss
    from zoo import pretrained

    assert cli.main(["pretrain", "--run", SMALL, str(run), "--float16",
                     "--corpus", str(corpus), "--trained-on", "a lent GPU"]) == 0
    entry = pretrained.index()[SMALL]
    path = package / "weights" / entry["file"]
    with h5py.File(path, "r") as f:
        dtypes = set()
        f.visititems(lambda _, item: dtypes.add(str(item.dtype))
                     if isinstance(item, h5py.Dataset) else None)
    assert dtypes == {"float16"}
    assert path.stat().st_size < 0.55 * (run / "model.weights.h5").stat().st_size
    shipped, preset = zoo.load(SMALL, weights="default"), zoo.load(str(run))
    rounded = [w.astype(np.float16).astype(np.float32) for w in trained_weights(preset)]
    for a, b in zip(trained_weights(shipped), rounded, strict=True):
        np.testing.assert_array_equal(np.asarray(a), b)
    metrics = json.loads((run / "metrics.json").read_text())
    record = json.loads((run / "run.json").read_text())
    settings = settle(SMALL, corpus, recipe="quick", recipe_overrides=QUICK,
                      **record["overrides"])
    assert entry["test_perplexity"] == round(perplexity(stream_loss(settings, rounded)), 2)
    assert entry["test_perplexity"] == pytest.approx(metrics["test_perplexity"], rel=1e-2)
    assert entry["run_test_perplexity"] == round(metrics["test_perplexity"], 2)
    assert entry["stored_dtype"] == "float16" and entry["machine"] == "a lent GPU"
    assert next_words(shipped, "a big") == entry["reference"]["next_words"]


def test_float16_shipping_refuses_another_text_and_keeps_what_was_shipped(
        run, corpus, package, tmp_path, capsys):
    from zoo import pretrained

    assert cli.main(["pretrain", "--run", SMALL, str(run)]) == 0
    before = {p: p.read_bytes() for p in package.rglob("*") if p.is_file()}
    other = write_corpus(tmp_path / "other", lines=(100, 30, 31))
    capsys.readouterr()
    # Storing the shipped tag again as float16 replaces it: refused without --replace, and
    # with it, refused when the options are wrong.
    for argv, message in [
        (["--float16", "--corpus", str(corpus)], "already ships weights tagged kim_char_lm_quick."),
        (["--replace", "--float16"], "pass the run's corpus with --corpus DIR"),
        (["--replace", "--float16", "--corpus", str(other)],
         "is not the text the run was trained on"),
        (["--replace", "--corpus", str(corpus)], "--corpus is read only with --float16"),
    ]:
        assert cli.main(["pretrain", "--run", SMALL, str(run), *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert cli.main(["pretrain", "--float16", "--only", "highway_fc10_mnist"]) == 2
    assert "go with --run" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in package.rglob("*") if p.is_file()} == before
    pretrained.index.cache_clear()
    assert pretrained.index()[SMALL].get("stored_dtype") is None


def test_the_shipped_command_names_the_runs_pooling():
    from training.experiments.pretrain import _train_command

    record = {"overrides": {"variant": "coupled", "pool_padding": True},
              "recipe": {"name": "kim_char_lm"}, "seed": 3}
    assert _train_command(SMALL, record).startswith(
        f"highway-zoo train {SMALL} --corpus PTB_DIR --variant coupled --pool-padding --seed 3")
    record["overrides"]["pool_padding"] = False
    assert "--pool-padding" not in _train_command(SMALL, record)


def test_cli_generates_as_the_library_does(run, capsys):
    assert main(["generate", str(run), "a", "big", "--max-length", "7", "--no-stop"]) == 0
    text = capsys.readouterr().out.strip()
    assert text == zoo.load(str(run)).generate("a big", 7, stop_token=None)
    assert main(["generate", str(run), "some", "--sampler", "top_k", "--top-k", "3",
                 "--seed", "4", "--max-length", "6", "--no-stop"]) == 0
    assert capsys.readouterr().out.strip() == zoo.load(str(run)).generate(
        "some", 6, sampler="top_k", k=3, seed=4, stop_token=None)


@pytest.mark.parametrize("argv, message", [
    (["generate", "RUN", "a", "--weights", "default"], "brings its own weights"),
    (["generate", "highway_fc10_mnist", "a"], "is not a language model"),
    (["generate", "lstm_char_small_rezero_ptb", "a"],
     "No pretrained weights for 'lstm_char_small_rezero_ptb'"),
    (["generate", "RUN", "a", "--sampler", "beam"], "invalid choice: 'beam'"),
    (["generate", "RUN", "zebra!"], "is not in this model's character vocabulary"),
    (["generate", "RUN", "The"], "it knows 't': write 'the'"),
])
def test_cli_generate_refuses_in_one_line(run, argv, message):
    argv = [str(run) if a == "RUN" else a for a in argv]
    proc = subprocess.run([sys.executable, "-m", "highway_zoo", *argv], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("highway-zoo")]
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr, \
        proc.stderr
