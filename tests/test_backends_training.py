"""Training on the JAX and PyTorch backends: train, resume, gate summaries, analyze, the
experiments, the refused strategies, and export under TensorFlow from a run trained there.

Each backend runs in its own process with KERAS_BACKEND set (tests/backends_workload.py, in two
parts: "train" and "experiments"); the checks (one subtest each) and the export run here,
under TensorFlow. One test per backend and part, so that each part runs once however
pytest-xdist spreads the tests (`make test` runs these with the rest).
"""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.util import tensor_util

import zoo

HERE = Path(__file__).resolve().parent
NAME = "highway_fc10_mnist"
LAYERS = ["highway_1", "highway_2"]  # depth 3: the stem, then two highway layers
TIMEOUT = 600  # seconds per part: a hang fails the test instead of blocking CI
BACKENDS = [
    pytest.param(name, id=name, marks=pytest.mark.skipif(
        importlib.util.find_spec(module) is None,
        reason=f"{module} is not installed (make setup installs it)"))
    for name, module in (("jax", "jax"), ("torch", "torch"))
]

pytestmark = pytest.mark.backends


def _run_part(part, backend, work):
    """Runs `part` of the workload under `backend`; what it recorded."""
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
           "XDG_CACHE_HOME": str(work / "cache")}  # where the JAX compilation cache goes
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    proc = subprocess.run([sys.executable, str(HERE / "backends_workload.py"), part, str(work)],
                          env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((work / f"{part}.json").read_text())


def _read(path):
    return json.loads(Path(path).read_text())


def _ok(record):
    assert record["code"] == 0, record["stderr"]


def _weights(run_dir):
    return [np.asarray(w) for w in zoo.load(NAME, depth=3, weights=run_dir).weights]


def check_train_writes_a_finished_run_that_records_the_backend(backend, record, work):
    assert record["backend"] == backend
    _ok(record["train"])
    # Data, training, checkpoints and the final save: no TensorFlow on this backend.
    assert record["train"]["tensorflow_imported"] is False
    assert record["resume"]["tensorflow_imported"] is False
    run = _read(work / "run" / "run.json")
    assert run["status"] == "finished"
    assert run["versions"]["backend"] == backend and backend in run["versions"]
    assert run["distribution"]["name"] == "default" and run["distribution"]["replicas"] == 1
    assert [e["epoch"] for e in _read(work / "run" / "history.json")] == [1, 2]
    metrics = _read(work / "run" / "metrics.json")
    assert metrics["iterations"] == 64 and metrics["test_accuracy"] > 0.5  # chance: 0.1
    assert not (work / "run" / "checkpoint").exists()


def check_the_commands_cache_what_jax_compiles(backend, record, work):
    """The train step compiled by the first run, loaded by the later ones (which resume
    bit-identically all the same: see the resume check)."""
    cache = work / "cache" / "highway-zoo" / "jax"
    if backend == "jax":
        assert any(path.name.startswith("jit_train_step") for path in cache.iterdir())
    else:
        assert not cache.exists()


def check_gate_summaries_go_to_tensorboard_and_gates_json(backend, record, work):
    gates = _read(work / "run" / "gates.json")
    assert gates["layers"] == LAYERS and gates["units"] == [50] * 2
    assert [e["epoch"] for e in gates["epochs"]] == [0, 1, 2]
    assert gates["epochs"][0]["transform_bias_mean"] == pytest.approx([-2.0] * 2)
    events = EventAccumulator(str(work / "run" / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tags = set(events.Tags()["tensors"])
    for name in LAYERS:
        assert {f"transform_gate/{name}", f"transform_bias/{name}"} <= tags
        means = events.Tensors(f"mean_transform_gate/{name}")
        assert [e.step for e in means] == [0, 1, 2]
        got = float(tensor_util.make_ndarray(means[-1].tensor_proto))
        assert got == pytest.approx(gates["epochs"][-1]["mean_t"][LAYERS.index(name)],
                                    abs=1e-6)
    assert [e.step for e in events.Tensors("gates/mean_T_heatmap")] == [0, 1, 2]
    assert [e.step for e in events.Tensors("gates/fig2")] == [2]


def check_an_interrupted_run_resumes_bit_identically(backend, record, work):
    resume = record["resume"]
    assert resume["interrupted"]
    assert resume["checkpoint"]["iterations"] == 40  # every 10; interrupted at 45
    assert "Resuming the interrupted run" in resume["resume_stdout"]
    assert "epoch 2 of 2 goes on after batch 8" in resume["resume_stdout"]
    run = _read(work / "resumed" / "run.json")
    assert run["status"] == "finished"
    assert [(r["iterations"], r["backend"]) for r in run["resumed"]] == [(40, backend)]
    for got, want in zip(_weights(work / "resumed"), _weights(work / "run"), strict=True):
        np.testing.assert_array_equal(got, want)  # bit for bit
    history, expected = _read(work / "resumed" / "history.json"), _read(work / "run" /
                                                                       "history.json")
    assert history[0] == expected[0]
    assert history[1]["resumed_at_batch"] == 8  # its training metrics cover the rest only
    for key in ("val_loss", "val_accuracy", "learning_rate"):
        assert history[1][key] == expected[1][key], key
    assert _read(work / "resumed" / "gates.json") == _read(work / "run" / "gates.json")
    assert _read(work / "resumed" / "metrics.json")["test_loss"] == _read(
        work / "run" / "metrics.json")["test_loss"]


def check_the_runs_batch_hooks_run_asynchronously(backend, record, work):
    """Both backends are thread-safe for Keras: the run's own batch hooks (loss check, clock,
    progress bar) are async_safe, so the loop does not wait for each step. The resumed run
    above, whose steps are awaited (checkpoints inside epochs), has the first run's weights
    bit for bit; so has this run, with its progress bar."""
    assert record["hook_threads"]["on_main"] == [False]
    for got, want in zip(_weights(work / "threads"), _weights(work / "run"), strict=True):
        np.testing.assert_array_equal(got, want)


def check_analyze_reads_the_run(backend, record, work):
    _ok(record["analyze"])
    analysis = work / "run" / "analysis"
    assert {"analysis.json", "fig2_gates.png", "t_gate_evolution.png"} <= {
        p.name for p in analysis.iterdir()}


def check_tf_distribute_strategies_are_refused_in_one_line(backend, record, work):
    for name, refused in record["refused"].items():
        assert refused["code"] == 2, (name, refused["stderr"])
        message = refused["stderr"].strip()
        assert "\n" not in message and message.startswith("highway-zoo train: error: "), name
        assert "needs KERAS_BACKEND=tensorflow" in message and f"on {backend}" in message
        assert ("keras.distribution.DataParallel" in message) == (backend == "jax")


def check_the_run_exports_to_a_saved_model_under_tensorflow(backend, record, work):
    from highway_zoo import cli
    from zoo.serving.predict import load_signature

    base_dir = work / "exported"
    assert cli.main(["export", NAME, "--weights", str(work / "run"), "--base-dir",
                     str(base_dir), "--no-warmup"]) == 0
    _, fn, input_name, _ = load_signature(base_dir / NAME / "1")
    saved = np.load(work / "predictions.npz")
    got = fn(**{input_name: saved["images"]})["probabilities"].numpy()
    np.testing.assert_allclose(got, saved["probabilities"], rtol=1e-5, atol=1e-6)


def check_demo(backend, record, work):
    _ok(record["demo"])
    demo = _read(work / "demo" / "results.json")
    assert sorted((r["kind"], r["depth"]) for r in demo["runs"]) == [
        ("highway", 2), ("plain", 2)]
    for r in demo["runs"]:  # trained on this backend: numbers a run can give
        assert 0.0 <= r["test_accuracy"] <= 1.0 and 0.0 < r["final_train_loss"] < 100
    # What the figure draws is tested in test_training (the same code on every backend).
    assert (work / "demo" / "accuracy_vs_depth.png").read_bytes()[:4] == b"\x89PNG"


def check_sweep(backend, record, work):
    _ok(record["sweep"])
    assert [r["depth"] for r in _read(work / "sweep" / "results.json")["runs"]] == [2]


def check_search(backend, record, work):
    _ok(record["tune"])
    best = _read(work / "tune" / "best_hyperparameters.json")
    assert best["trials"] == 1
    assert zoo.load(NAME, weights=str(work / "tune" / "best_model")).overrides["depth"] == 3
    hparams = EventAccumulator(str(work / "tune" / "tensorboard"))
    hparams.Reload()
    assert "_hparams_/experiment" in hparams.Tags()["tensors"]


def check_strategies_event_files_and_gate_summaries_need_no_tensorflow(backend, record, work):
    """`training.runtime.distribute`'s one-device strategy, `training.summaries`' event files and
    `GateSummaries` (on a model fit on NumPy arrays) import and run without TensorFlow, which
    JAX and PyTorch runs load for tf.data only."""
    assert record["without_tensorflow"] == {"strategy": "SingleDevice", "devices": True,
                                            "tensorflow_imported": False}
    events = EventAccumulator(str(work / "events"), size_guidance={"tensors": 0})
    events.Reload()
    (scalar,) = events.Tensors("a/scalar")
    assert scalar.step == 3 and float(tensor_util.make_ndarray(scalar.tensor_proto)) == 0.5
    assert events.SummaryMetadata("a/scalar").summary_description == "one half"
    assert events.SummaryMetadata("a/scalar").plugin_data.plugin_name == "scalars"
    (histogram,) = events.Tensors("a/histogram")
    assert tensor_util.make_ndarray(histogram.tensor_proto).tolist() == [[0.0, 1.0, 4.0]]
    (image,) = events.Tensors("a/image")
    width, height, png = tensor_util.make_ndarray(image.tensor_proto)
    assert (width, height) == (b"3", b"2") and png.startswith(b"\x89PNG")
    assert [e["epoch"] for e in _read(work / "numpy_fit" / "gates.json")["epochs"]] == [0, 1]
    events = EventAccumulator(str(work / "numpy_fit" / "tensorboard"))
    events.Reload()
    assert {f"mean_transform_gate/{name}" for name in LAYERS} <= set(events.Tags()["tensors"])


TRAIN_CHECKS = [
    check_strategies_event_files_and_gate_summaries_need_no_tensorflow,
    check_train_writes_a_finished_run_that_records_the_backend,
    check_gate_summaries_go_to_tensorboard_and_gates_json,
    check_an_interrupted_run_resumes_bit_identically,
    check_the_runs_batch_hooks_run_asynchronously,
    check_analyze_reads_the_run,
    check_the_run_exports_to_a_saved_model_under_tensorflow,
    check_tf_distribute_strategies_are_refused_in_one_line,
]


def _check_all(checks, backend, record, work, subtests):
    for check in checks:
        with subtests.test(msg=check.__name__.removeprefix("check_")):
            check(backend, record, work)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_train_resume_summaries_analyze_export_on(backend, tmp_path, subtests):
    """`highway-zoo train` (gate summaries on), a run interrupted and resumed, `highway-zoo
    analyze`, the export under TensorFlow, the refused strategies: one subtest each."""
    record = _run_part("train", backend, tmp_path)
    assert record["backend"] == backend
    _ok(record["train"])  # what every check reads
    _check_all(TRAIN_CHECKS, backend, record, tmp_path, subtests)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_demo_sweep_and_search_on(backend, tmp_path, subtests):
    record = _run_part("experiments", backend, tmp_path)
    _check_all([check_demo, check_sweep, check_search], backend, record, tmp_path, subtests)
