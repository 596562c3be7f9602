"""The research scripts behind the result pages (benchmarks/research/, the repository's, not
the wheel's), each run on tiny data written here, into a copy of docs/results/'s layout (never
the committed pages); and the H lesion they measure, `zoo.analysis.h_silenced`, against the
highway layer's own formula."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import zoo
from benchmarks.research import (
    embedding_spread,
    fig1_gates,
    float16_check,
    initial_loss,
    jpeg_cost,
    lesion_h,
    lm_states,
    lm_states_page,
    lr_range,
    points_lost,
    ptb_large_gpu_8epochs_page,
    ptb_large_gpu_25epochs_page,
    ptb_small_page,
    ptb_small_pool_padding_page,
    run_fit,
    token_gates_page,
)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "results"
SMALL = "lstm_char_small_ptb"
NARROW = {"lstm_units": 8, "classes": 40}  # a Small that builds in a moment


def _write(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def _history(epochs: int, start: float = 300.0) -> list[dict]:
    return [{"epoch": e, "val_perplexity": start / e, "learning_rate": 1.0 / e}
            for e in range(1, epochs + 1)]


# --- the pages ------------------------------------------------------------------------------


def test_ptb_small_page_rebuilds_the_study_table(tmp_path):
    page = tmp_path / "language_model" / "ptb_small"
    source = DOCS / "language_model" / "ptb_small"
    for name in ("study.json", "coupled_seed0/result.json", "full_seed0/result.json"):
        (page / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / name, page / name)
    ptb_small_page.main(["--results", str(tmp_path)])
    table = (page / "table.md").read_text()
    study = json.loads((source / "study.json").read_text())
    planned = len(study["variants"]) * len(study["seeds"])
    assert f"2 of {planned} runs finished" in table
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert sorted(r.split(" | ")[0].strip("| ") for r in rows[1:]) == ["coupled", "full"]
    assert (page / "perplexity.png").stat().st_size > 0


def test_pool_padding_page_compares_the_two_poolings(tmp_path):
    runs = tmp_path / "language_model"
    for folder, test in (("ptb_small/coupled_seed0", 95.0),
                         ("ptb_small_pool_padding/coupled_pool_padding_seed0", 91.5)):
        _write(runs / folder / "history.json", _history(25))
        _write(runs / folder / "metrics.json", {"test_perplexity": test})
    ptb_small_pool_padding_page.main(["--results", str(tmp_path)])
    page = runs / "ptb_small_pool_padding"
    rows = (page / "table.md").read_text().splitlines()[2:]
    assert rows == ["| windows inside the word (the zoo's default) | 50.0 | 12.00 | 95.00 | "
                    "+2.70 |",
                    "| every window of the padded word (Kim's, --pool-padding) | 50.0 | 12.00 | "
                    "91.50 | -0.80 |"]
    assert (page / "perplexity.png").stat().st_size > 0


def _large_runs(results: Path) -> None:
    for v in ptb_large_gpu_8epochs_page.VARIANTS:
        run = {"architecture": SMALL,
               "overrides": {"variant": v, "stateful": True, "batch_size": 20, **NARROW}}
        _write(results / ptb_large_gpu_8epochs_page.PAGE / "runs" / v / "run.json", run)
        _write(results / ptb_large_gpu_8epochs_page.PAGE / "runs" / v / "history.json",
               _history(8))


def test_large_first_epochs_page_counts_the_stateless_nets(tmp_path):
    _large_runs(tmp_path)
    ptb_large_gpu_8epochs_page.main(["--results", str(tmp_path)])
    page = tmp_path / ptb_large_gpu_8epochs_page.PAGE
    rows = (page / "table.md").read_text().splitlines()[2:]
    variants = ptb_large_gpu_8epochs_page.VARIANTS
    assert [r.split(" | ")[0] for r in rows] == [f"| {v}" for v in variants]
    coupled = rows[1].split(" | ")
    assert coupled[2] == f"{zoo.load(SMALL, variant='coupled', **NARROW).count_params():,}"
    assert coupled[3:7] == ["300.0", "150.0", "75.0", "37.5"] and coupled[-1] == "79.13 |"
    assert (page / "perplexity.png").stat().st_size > 0


def test_large_25_epochs_page_reads_its_runs_and_the_first_epochs_beside_them(tmp_path):
    _large_runs(tmp_path)
    page = tmp_path / ptb_large_gpu_25epochs_page.PAGE
    for v, test in (("coupled", 78.47), ("full", 79.5)):
        _write(page / f"{v}_seed0" / "run.json", {"architecture": SMALL,
                                                  "overrides": {"variant": v, **NARROW}})
        _write(page / f"{v}_seed0" / "history.json", _history(25))
        _write(page / f"{v}_seed0" / "metrics.json",
               {"test_perplexity": test, "tokens_per_second": 62700.4})
    ptb_large_gpu_25epochs_page.main(["--results", str(tmp_path)])
    rows = (page / "table.md").read_text().splitlines()[2:]
    assert rows[0].startswith("| coupled | ") and rows[0].endswith(
        "| 37.5 | 12.00 | **78.47** | 78.9 | 79.13 | 62,700 |")
    assert rows[1].startswith("| full | ") and "| **79.50** |  | 79.09 |" in rows[1]
    assert (page / "perplexity.png").stat().st_size > 0


def test_token_gates_page_tabulates_the_analyses_found(tmp_path):
    here, records = tmp_path / "token_gates", tmp_path / "language_model"
    for name in ("ptb_coupled_seed0", "ptb_coupled_seed0_share"):
        (here / name).mkdir(parents=True)
        shutil.copy(DOCS / "token_gates" / name / "tokens.json", here / name / "tokens.json")
    _write(records / "ptb_small" / "coupled_seed0" / "metrics.json", {"test_perplexity": 96.25})
    token_gates_page.main(["--results", str(tmp_path)])
    variants = (here / "ptb_small_variants.md").read_text().splitlines()
    assert variants[0] == "| mean gate per token | Coupled, T |"  # only the run found
    assert len(variants) == 2 + len(token_gates_page.ROWS)
    share = (here / "ptb_small_share.md").read_text().splitlines()
    assert share[0] == "| per test token | Coupled |"
    assert share[2] == "| test perplexity (seed 0) | 96.25 |"
    for name in ("ptb_small_variants.png", "ptb_small_share.png"):
        assert (here / name).stat().st_size > 0


# --- the measurements, on a tiny trained Small ---------------------------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from test_char_lm import write_corpus

    directory = write_corpus(tmp_path_factory.mktemp("corpus"))
    # The float16 check's reference sentence (training.experiments.pretrain), spelled in full.
    with (directory / "train.txt").open("a", encoding="utf-8") as train:
        train.write("the company said it expects\n")
    return directory


@pytest.fixture(scope="module")
def run(corpus, tmp_path_factory):
    from test_char_lm import SHORT

    from training.language_model import train_lm

    out = tmp_path_factory.mktemp("runs") / "coupled_seed0"
    train_lm(SMALL, corpus, out=out, recipe="quick", epochs=1, seed=0, verbose=0,
             recipe_overrides=SHORT, lstm_units=24)
    return out


def test_h_silenced_leaves_each_highway_layer_its_carry_path_and_restores_it(run):
    import keras

    from zoo.analysis import h_silenced
    from zoo.analysis.tokens import char_embedder

    model = zoo.load(str(run))
    layer = char_embedder(model).highways[0]
    d = layer.kernel.shape[0]
    x = np.random.default_rng(0).uniform(-1, 1, (7, d)).astype("float32")
    before = keras.ops.convert_to_numpy(layer(x))
    kernel, bias = np.asarray(layer.kernel), np.asarray(layer.bias)
    t = layer.bias_columns("t")
    gate = 1 / (1 + np.exp(-(x @ kernel[:, t] + bias[t])))  # T(x); coupled: C = 1 - T
    with h_silenced(model):
        silenced = keras.ops.convert_to_numpy(layer(x))
        assert np.all(np.asarray(layer.bias)[layer.bias_columns("h")] == -1e4)
    np.testing.assert_allclose(silenced, (1 - gate) * x, rtol=1e-5, atol=1e-6)
    assert not np.allclose(silenced, before)  # H mattered before
    np.testing.assert_array_equal(np.asarray(layer.bias), bias)  # restored
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x)), before)


def test_lesion_h_measures_each_run_once_and_resumes(run, corpus, tmp_path, capsys):
    lesion_h.main([str(corpus), str(run), "--out", str(tmp_path)])
    (result,) = json.loads((tmp_path / "lesion_h.json").read_text())
    assert result["run"] == "coupled_seed0" and result["variant"] == "coupled"
    assert result["intact"] == pytest.approx(result["recorded"], rel=1e-4)
    # After one epoch T is still near its initial 0.12 and H small: a small change, but one.
    assert result["h_silenced"] != result["intact"]
    table = (tmp_path / "lesion_h.md").read_text().splitlines()
    assert table[2] == (f"| coupled_seed0 | coupled | {result['intact']:.2f} | "
                        f"{result['h_silenced']:.2f} | "
                        f"{result['h_silenced'] - result['intact']:+.2f} |")
    capsys.readouterr()
    lesion_h.main([str(corpus), str(run), "--out", str(tmp_path)])  # kept: nothing measured
    assert capsys.readouterr().out == ""
    assert len(json.loads((tmp_path / "lesion_h.json").read_text())) == 1


def test_float16_check_keeps_the_perplexity_and_the_next_words(run, corpus, tmp_path):
    float16_check.main([str(run), str(corpus), str(tmp_path)])
    check = json.loads((tmp_path / "float16_check.json").read_text())
    assert check["float32"]["test_perplexity"] == \
        json.loads((run / "metrics.json").read_text())["test_perplexity"]
    assert check["float16"]["test_perplexity"] == pytest.approx(
        check["float32"]["test_perplexity"], rel=1e-2)
    assert [w for w, _ in check["float16"]["next_words"]] == \
        [w for w, _ in check["float32"]["next_words"]]
    assert (tmp_path / f"{SMALL}.weights.h5").stat().st_size < \
        0.6 * (run / "model.weights.h5").stat().st_size


def test_embedding_spread_reads_the_embedder_after_the_first_steps(corpus, capsys):
    embedding_spread.main([str(corpus), "coupled", "--model", SMALL, "--steps", "2"])
    readings = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["step"] for r in readings] == [0, 1, 2]
    assert readings[0]["loss_per_token"] is None and readings[2]["loss_per_token"] > 0
    for r in readings:
        assert 0 <= r["dead_units"] <= 1 and r["rms"] > 0 and r["spread_across_words"] > 0


def test_lm_states_gradient_norm_is_the_norm_of_an_unclipped_sgd_step(corpus):
    """Against SGD itself: with the rate 1, no momentum and no clipping, one step moves the
    weights by minus the gradient, so the norm of the move is the gradient's norm; reading it
    changes no state (the step after it moves as far again)."""
    from training.language_model import compiled_model, settle

    settings = settle(SMALL, corpus, recipe="quick", recipe_overrides={
        "learning_rate": 1.0, "momentum": 0.0, "nesterov": False, "global_clipnorm": None})
    model = compiled_model(settings)
    x, y = settings.train
    batch = settings.recipe["batch_size"]
    for step in range(2):  # the second step starts from carried states
        rows = slice(batch * step, batch * (step + 1))
        norm = lm_states.gradient_norm(model, x[rows], y[rows])
        before = [np.array(w) for w in model.trainable_weights]
        model.train_on_batch(x[rows], y[rows])
        moved = np.sqrt(sum(np.sum((np.array(w) - b) ** 2)
                            for w, b in zip(model.trainable_weights, before, strict=True)))
        assert norm > 0 and moved == pytest.approx(norm, rel=1e-4)


@pytest.mark.parametrize("states", ["carried", "reset"])
def test_lm_states_reads_the_first_steps_with_states_carried_or_reset(corpus, states, tmp_path,
                                                                       capsys):
    out = tmp_path / "states.json"
    readings = lm_states.main([str(corpus), "--states", states, "--model", SMALL,
                               "--highway-layers", "2", "--recipe", "quick", "--steps", "3",
                               "--every", "2", "--out", str(out)])
    assert [r["step"] for r in readings] == [0, 2, 3]
    assert readings[0]["cell_rms"] == [0.0, 0.0]  # no batch read yet
    for r in readings[1:]:  # both carry and reset read the states at a batch's end
        assert all(v > 0 for v in r["cell_rms"] + r["hidden_rms"]) and r["loss_per_token"] > 0
    assert readings[0]["gradient_norm"] > 0 and readings[-1]["gradient_norm"] is None
    assert all(r["offset_ratio"] == pytest.approx(r["embedder_rms"] / r["embedder_spread"],
                                                  rel=1e-2) for r in readings)
    result = json.loads(out.read_text())
    assert result["states"] == states and result["readings"] == readings
    # Against the uniform guess: the untrained net (Kim's +-0.05 init) predicts about
    # uniformly over the vocabulary, and three steps at the rate 1 stay near it.
    words = {w for line in (corpus / "train.txt").read_text().splitlines() for w in line.split()}
    lm_states.main([str(corpus), "--states", states, "--model", SMALL, "--highway-layers", "2",
                    "--recipe", "quick", "--steps", "0", "--out", str(tmp_path / "0.json")])
    untrained = json.loads((tmp_path / "0.json").read_text())["validation_perplexity"]
    assert untrained == pytest.approx(len(words) + 1, rel=0.3)  # the words and <eos>
    assert result["validation_perplexity"] == pytest.approx(untrained, rel=0.5)


def test_lm_states_page_tables_and_draws_every_run(corpus, tmp_path):
    page = tmp_path / lm_states_page.PAGE
    with pytest.raises(SystemExit, match="No lm_states results"):
        page.mkdir(parents=True)
        lm_states_page.main(["--results", str(tmp_path)])
    runs = {"plain_one_layer_carried_seed0.json": ("plain", "1", "carried"),
            "residual_carried_seed0.json": ("residual", "2", "carried"),
            "residual_reset_seed0.json": ("residual", "2", "reset")}
    for name, (variant, layers, states) in runs.items():
        lm_states.main([str(corpus), "--states", states, "--model", SMALL, "--variant", variant,
                        "--highway-layers", layers, "--recipe", "quick", "--steps", "2",
                        "--every", "1", "--out", str(page / name)])
    lm_states_page.main(["--results", str(tmp_path)])
    rows = [r.strip("| ").split(" | ")
            for r in (page / "table.md").read_text().splitlines()[2:]]
    assert [r[:2] for r in rows] == [["plain (1 layer)", "carried"],
                                     ["residual (2 layers)", "carried"],
                                     ["residual (2 layers)", "reset"]]
    for row, name in zip(rows, runs):  # the files in name order, as the page reads them
        result = json.loads((page / name).read_text())
        last = result["readings"][-1]
        assert row[6] == f"{last['embedder_rms']:.2g}"
        assert row[-1] == f"{result['validation_perplexity']:.1f}"
    assert (page / "states.png").stat().st_size > 0


@pytest.mark.slow
def test_gpu_large_script_trains_both_variants_and_ships_the_float16_parts(corpus, tmp_path):
    """The GPU lease's script as it runs there (JAX), on the tiny corpus with a short Small;
    no GPU needed (nvidia-smi's absence is only logged)."""
    (tmp_path / ".device").mkdir()
    (tmp_path / ".device" / "ptb_prepared").symlink_to(corpus)
    env = {**os.environ, "LOCAL": "1", "PY": sys.executable, "MODEL": SMALL,
           "EXTRA": "--recipe quick --epochs 1 --batch-size 5 --bptt-steps 10",
           "OUT": str(tmp_path / "out"), "R": str(tmp_path / "runs"), "PROGRESS_EVERY": "1",
           "DEADLINE": "500", "FULL_DEADLINE": "500", "END": "560",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "research" / "gpu_large.sh")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=590)
    assert "coupled rc 0" in proc.stdout and "full rc 0" in proc.stdout, proc.stdout
    assert "f16 rc 0" in proc.stdout, (tmp_path / "runs" / "f16_check.log").read_text()
    runs = tmp_path / "runs"
    for v in ("coupled", "full"):
        assert json.loads((runs / v / "run.json").read_text())["status"] == "finished"
    check = json.loads((runs / "w16" / "float16_check.json").read_text())
    assert "test_perplexity" in check["float16"]
    assert (tmp_path / "out" / "large_runs.tgz").is_file()
    assert list((tmp_path / "out").glob("large_f16.part*"))


@pytest.mark.slow
def test_gpu_large_script_gives_residual_and_plain_the_papers_layer_counts(corpus, tmp_path):
    """VARIANTS="residual plain" with nothing to ship: Residual with twice Small's one highway
    layer, Plain with one (Greff et al. §5.2), each as its run records it."""
    (tmp_path / ".device").mkdir()
    (tmp_path / ".device" / "ptb_prepared").symlink_to(corpus)
    env = {**os.environ, "LOCAL": "1", "PY": sys.executable, "MODEL": SMALL,
           "VARIANTS": "residual plain", "SHIP": "",
           "EXTRA": "--recipe quick --epochs 1 --batch-size 5 --bptt-steps 10",
           "OUT": str(tmp_path / "out"), "R": str(tmp_path / "runs"), "PROGRESS_EVERY": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "research" / "gpu_large.sh")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=590)
    assert "residual rc 0" in proc.stdout and "plain rc 0" in proc.stdout, proc.stdout
    assert "f16 rc" not in proc.stdout and not list((tmp_path / "out").glob("large_f16.part*"))
    for variant, layers in (("residual", 2), ("plain", 1)):
        run = json.loads((tmp_path / "runs" / variant / "run.json").read_text())
        assert run["status"] == "finished"
        assert run["overrides"]["variant"] == variant
        assert run["overrides"]["highway_layers"] == layers
    assert (tmp_path / "out" / "large_runs.tgz").is_file()


@pytest.mark.slow
def test_gpu_nips_table_script_trains_benchmarks_and_resumes_from_its_own_parts(tmp_path):
    """The CIFAR lease's script as it runs there (JAX, no TensorFlow needed), on a tiny JPEG
    folder archive with Highway A for one epoch; the second call carries the first call's
    parts back in and finds the run where the first left it."""
    from test_prepared_images import CIFAR, cifar_arrays, write_folder

    device = tmp_path / ".device"
    folder = write_folder(tmp_path / "src" / "cifar10-jpeg", cifar_arrays(), CIFAR, suffix=".jpg")
    device.mkdir()
    subprocess.run(["tar", "czf", str(device / "cifar10-jpeg.tar.gz"), "-C", str(folder.parent),
                    folder.name], check=True)
    (device / "commit.txt").write_text("0123abc\n")
    env = {**os.environ, "LOCAL": "1", "PY": sys.executable, "MODELS": "highway_a_cifar10",
           "EXTRA": "--epochs 1", "R": str(tmp_path / "runs"),
           "BENCH_ARGS": "--models highway_conv16_mnist --steps 2 --warmup 1 --repeats 1",
           "PROGRESS_EVERY": "1", "DEADLINE": "400",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    def call(out):
        proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "research" /
                                           "gpu_nips_table.sh")], cwd=tmp_path,
                              env={**env, "OUT": str(out)}, capture_output=True, text=True,
                              timeout=590)
        assert "study rc 0" in proc.stdout, proc.stdout + proc.stderr
        return proc.stdout

    first = call(tmp_path / "out1")
    assert "bench rc 0" in first
    bench = json.loads((tmp_path / "out1" / "gpu_conv_peer.json").read_text())
    assert "highway_conv16_mnist" in json.dumps(bench)
    parts = sorted((tmp_path / "out1").glob("study.tgz.*"))
    assert parts
    shutil.rmtree(tmp_path / "runs")  # the next lease is a fresh machine
    for part in parts:
        shutil.copy(part, device)
    second = call(tmp_path / "out2")
    assert "resumed" in second
    study = tmp_path / "runs" / "nips_table2_gpu"
    logs = sorted(study.glob("lease-*/study.log"))
    assert len(logs) == 2 and "(finished earlier, kept)" in logs[1].read_text()
    calls = (tmp_path / "runs" / "nips_table2_gpu.commit.txt").read_text().splitlines()
    assert len(calls) == 2 and all(c.endswith("Z 0123abc") for c in calls)  # one per call
    run = json.loads((study / "highway_a_cifar10_seed0" / "run.json").read_text())
    assert run["status"] == "finished"
    assert not list(study.rglob(".lock")) and not (study / ".claims").exists()


def test_fig1_gates_reads_t_as_the_paper_defines_it(tmp_path, capsys):
    """With W_T zeroed, T = sigmoid(x W_T + b_T) is sigmoid(b_T) for every input and unit:
    the mean T the script reads for each layer must be that number."""
    from zoo.analysis.gates import highway_layers

    study, b_t = tmp_path / "fig1", -3.0
    (study / "highway_fc3" / "search").mkdir(parents=True)
    _write(study / "study.json", {"depths": [3], "kinds": ["highway"], "epochs": 2,
                                  "seed": 0, "code": None})
    model = zoo.load("highway_fc10_mnist", depth=3, activation="tanh", transform_bias=b_t)
    for layer in highway_layers(model):
        kernel = np.asarray(layer.kernel)
        d = kernel.shape[0]
        kernel[:, d:2 * d] = 0.0  # the fused kernel is [H | T]
        layer.kernel.assign(kernel)
    for trial_id, kept in (("00", True), ("01", False)):
        trial = study / "highway_fc3" / "search" / f"trial_{trial_id}"
        _write(trial / "trial.json", {"trial_id": trial_id, "status": "COMPLETED",
                                      "hyperparameters": {"values": {
                                          "learning_rate": 0.02, "momentum": 0.5,
                                          "activation": "tanh", "transform_bias": b_t}}})
        _write(trial / "history.json", {"seconds": 1.0, "history": {"loss": [1.0, 0.5]}})
        if kept:
            model.save_weights(trial / "checkpoint.weights.h5")
    out = tmp_path / "gates.json"
    fig1_gates.main([str(study), "--images", "64", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["images"] == 64 and result["runs_without_checkpoint"] == 1
    [run] = result["runs"]
    sigmoid = 1.0 / (1.0 + np.exp(-b_t))
    assert run["initial_T"] == pytest.approx(sigmoid, abs=1e-5)
    assert run["mean_T_per_layer"] == pytest.approx([sigmoid, sigmoid], abs=1e-5)  # 2 layers
    assert run["step_size"] == pytest.approx(0.04) and run["final_loss"] == 0.5
    assert "1 runs (1 without a checkpoint)" in capsys.readouterr().out



def test_run_fit_scores_the_net_where_the_run_stands(tmp_path, capsys):
    """An interrupted run's checkpoint, then the finished run's weights: the test accuracy
    run_fit measures is the one the run recorded at that epoch (its own evaluation)."""
    import keras
    from test_prepared_images import mnist_arrays, write_folder

    from training import train
    from training.checkpoints import assign_model_weights
    from training.data import prepare_images

    folder = write_folder(tmp_path / "pngs", mnist_arrays(), [str(d) for d in range(10)])
    data = tmp_path / "prepared"
    prepare_images("mnist", folder, data)
    run_dir = tmp_path / "run"

    class StopAfterFirstEpoch(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            raise KeyboardInterrupt

    args = dict(data_dir=data, out=run_dir, recipe="quick", epochs=3, dropout=0.5, verbose=0)
    with pytest.raises(KeyboardInterrupt):
        train("highway_conv16_mnist", callbacks=[StopAfterFirstEpoch()], **args)
    history = json.loads((run_dir / "history.json").read_text())
    result = run_fit.run_fit(run_dir, data, examples=20)
    assert result["weights"].startswith("ckpt-") and result["overrides"] == {"dropout": 0.5}
    at_checkpoint = history[result["epoch"] - 1]
    assert result["test"]["accuracy"] == round(100 * at_checkpoint["val_accuracy"], 2)
    # no weight decay in the quick recipe: the run's val_loss is the cross-entropy alone
    assert result["test"]["cross_entropy"] == pytest.approx(at_checkpoint["val_loss"], abs=2e-4)
    assert result["train"]["examples"] == 20
    assert result["run"] == f"{tmp_path.name}/run" and str(tmp_path) not in json.dumps(result)
    checkpoint = run_dir / "checkpoint" / result["weights"]
    with pytest.raises(ValueError, match="there, float32"):  # another net's: refused
        assign_model_weights(zoo.load("highway_conv32_mnist"), checkpoint)

    train("highway_conv16_mnist", **args)  # resumes to the end
    capsys.readouterr()
    out = tmp_path / "fit.json"
    run_fit.main([str(run_dir), "--data-dir", str(data), "--out", str(out)])
    result = json.loads(out.read_text())
    final = json.loads((run_dir / "history.json").read_text())[-1]
    assert result["epoch"] == 3 and result["weights"] == "model.weights.h5"
    assert result["test"]["accuracy"] == round(100 * final["val_accuracy"], 2)
    assert result["test"]["cross_entropy"] == pytest.approx(final["val_loss"], abs=2e-4)
    assert abs(final["val_loss"] - at_checkpoint["val_loss"]) > 1e-3  # the epochs differ
    assert result["train"]["examples"] == 30  # all there are
    assert json.loads(capsys.readouterr().out) == result
    with pytest.raises(SystemExit) as exit_:  # not a run directory: one line, status 2
        run_fit.main([str(tmp_path / "nothing"), "--data-dir", str(data)])
    assert exit_.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_jpeg_cost_reencodes_measures_and_extends_its_line_to_zero_error():
    rng = np.random.default_rng(0)
    # Smooth images (a gradient and noise): JPEG keeps them at a high quality, not at a low one.
    base = np.linspace(0, 200, 32)[None, :, None, None] + np.zeros((4, 32, 32, 3))
    images = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype("uint8")
    high, low = jpeg_cost.reencode(images, 95), jpeg_cost.reencode(images, 20)
    assert high.shape == images.shape and high.dtype == np.uint8
    assert jpeg_cost.added_mse(images, images) == 0
    assert 0 < jpeg_cost.added_mse(images, high) < jpeg_cost.added_mse(images, low)
    # Points on accuracy = 0.9 - 0.001 * (copy's error + added): the line is found again.
    added = [0.0, 76.0, 100.0]
    accuracy = [0.9 - 0.001 * (jpeg_cost.COPY_MSE + a) for a in added]
    line = jpeg_cost.extrapolate(added, accuracy)
    assert line["at_zero_error"] == pytest.approx(0.9)
    assert line["cost_of_the_copy"] == pytest.approx(0.001 * jpeg_cost.COPY_MSE)
    assert line["at_the_copy"] == pytest.approx(accuracy[0])
    assert line["rms_residual"] == pytest.approx(0, abs=1e-12)
    # 30.5 dB against the original pixels, as the data's README measured.
    assert 10 * np.log10(255**2 / jpeg_cost.COPY_MSE) == pytest.approx(30.5)


def test_lr_range_grows_the_rate_geometrically_and_finds_where_the_loss_turns():
    rates = lr_range.geometric_rates(0.01, 1.0, 5)
    np.testing.assert_allclose(rates, [0.01, 0.01 * 10**0.5, 0.1, 0.1 * 10**0.5, 1.0])
    # The bias-corrected average of a constant is that constant from the first step.
    np.testing.assert_allclose(lr_range.smoothed([2.0] * 4), [2.0] * 4)
    losses = [2.3, 2.0, 1.5, 1.0, 0.8, 1.5, 4.0, 9.0, 20.0, 50.0]
    rates = lr_range.geometric_rates(0.001, 1.0, len(losses))
    result = lr_range.summary(rates, losses)
    curve = lr_range.smoothed(losses, 0.95)
    assert result["rate_at_lowest_loss"] == rates[int(np.argmin(curve))]
    first_above = next(i for i in range(int(np.argmin(curve)), len(curve)) if curve[i] > curve[0])
    assert result["rate_where_it_diverges"] == rates[first_above]
    assert lr_range.summary(rates[:5], losses[:5])["rate_where_it_diverges"] is None


def _points_run(path, accuracies, overrides):
    path.mkdir()
    (path / "run.json").write_text(json.dumps({
        "architecture": "highway_cifar10", "overrides": overrides, "seed": 0,
        "recipe": {"name": "caffe_cifar"}}))
    (path / "history.json").write_text(json.dumps(
        [{"epoch": i + 1, "val_accuracy": a, "loss": 2 - a} for i, a in enumerate(accuracies)]))
    return path


def test_points_lost_sets_each_run_against_the_released_log(tmp_path):
    out = tmp_path / "page"
    out.mkdir()
    log = [0.1, 0.3, 0.4, 0.5, 0.6]  # before training, then epochs 1-4
    (out / points_lost.LOG_FILE).write_text(json.dumps({"test_accuracy": log}))
    base = _points_run(tmp_path / "base", [0.3, 0.35, 0.45, 0.5], {"dtype": "mixed_bfloat16"})
    short = _points_run(tmp_path / "short", [0.3, 0.4], {"first_conv_stddev": 1.0})
    points_lost.main([str(base), str(short), "--out", str(out), "--window", "2,4"])
    rows = json.loads((out / "results.json").read_text())
    assert rows[0]["window_mean"] == pytest.approx((0.35 + 0.45 + 0.5) / 3)
    assert rows[0]["log_window_mean"] == pytest.approx((0.4 + 0.5 + 0.6) / 3)
    assert rows[0]["behind_the_log"] == pytest.approx(100 * (0.5 - (0.35 + 0.45 + 0.5) / 3))
    assert rows[0]["dtype"] == "mixed_bfloat16" and rows[0]["changes"] == {}
    assert rows[1]["window_mean"] is None and rows[1]["changes"] == {"first_conv_stddev": 1.0}
    text = (out / "table.md").read_text()
    row = "| base | mixed_bfloat16 | none (default) | 30.0 | 35.0 | 45.0 | 50.0 | 43.3 | 6.7 |"
    assert row in text
    assert (out / "curves.png").stat().st_size > 0


def test_initial_loss_normalises_like_the_layer_and_scores_like_numpy():
    from layers import GlobalContrastNormalization

    images = np.random.default_rng(0).integers(0, 256, (3, 8, 8, 3)).astype("uint8")
    np.testing.assert_allclose(initial_loss.gcn(images),
                               GlobalContrastNormalization()(images.astype("float32")),
                               atol=1e-5)
    probabilities = np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8]])
    loss, share = initial_loss.loss_and_majority(probabilities, np.array([0, 1, 2]))
    assert loss == pytest.approx(-(np.log(0.7) + np.log(0.3) + np.log(0.8)) / 3)
    assert share == pytest.approx(2 / 3)
