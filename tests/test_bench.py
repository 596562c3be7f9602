"""The benchmark harness (benchmarks/, the repository's, not the wheel's): the one driver
every script uses (children, repeats, medians, tables, results), summaries, ratios and memory
slope from known runs, one tiny end-to-end headline run in fresh processes, the wide and conv
FLOP counts, the ImageNet conv rows, the input pipeline's run, and the CLI's checks (and its
refusal where the benchmarks are not installed)."""

import importlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time

import pytest

from benchmarks import (
    conv,
    conv_peer,
    driver,
    headline,
    pipeline,
    start_up,
    suite,
    trial_memory,
    whole_process,
    wide,
)
from highway_zoo.cli import main as cli_main
from training.runtime import jax_cache


def _run(total, epoch_s, loss=0.1, acc=0.9, mem=100.0, steps_per_epoch=10, step_s=None):
    step_s = step_s or [e / steps_per_epoch for e in epoch_s]
    return {"build_s": 0.5, "first_step_s": 1.0, "epoch_s": epoch_s, "step_s": step_s,
            "steps_per_epoch":
            steps_per_epoch, "total_s": total, "final_loss": loss, "test_accuracy": acc,
            "params": 1000, "peak_rss_mb": 500.0, "train_mem_mb": mem}


def test_summary_takes_medians_and_steady_state_after_the_first_epoch():
    runs = [_run(3.0, [2.0, 0.5, 0.5]), _run(9.0, [8.0, 1.0, 1.0]), _run(4.0, [3.0, 0.4, 0.6])]
    row = headline.summarise("numpy", 10, runs)
    assert row["total_s"] == 4.0
    assert row["to_first_step_s"] == 1.5
    # steps/s per run: 10/0.5, 10/1.0, 10/0.5 (median of the later epochs) -> median 20
    assert row["steady_steps_per_s"] == row["epoch_steps_per_s"] == pytest.approx(20.0)
    # steady steps/s come from the time per step inside the epochs, without their set-up
    row = headline.summarise("numpy", 10, [_run(3.0, [2.0, 0.5, 0.5], step_s=[1.0, 0.02, 0.03])])
    assert row["steady_steps_per_s"] == pytest.approx(1 / 0.025)
    assert row["epoch_steps_per_s"] == pytest.approx(20.0)


def test_steady_step_time_runs_from_the_first_step_end_to_the_last():
    from benchmarks.implementations import steady_step_s

    assert steady_step_s([10.0, 10.1, 10.3], epoch_s=5.0) == pytest.approx(0.15)
    assert steady_step_s([10.0], epoch_s=0.4) == 0.4


def test_ratios_are_ours_over_theirs_at_the_same_depth():
    rows = [
        headline.summarise("highway_zoo", 30, [_run(2.0, [1.0, 0.5])]),
        headline.summarise("pytorch", 30, [_run(4.0, [1.0, 1.0])]),
        headline.summarise("pytorch", 10, [_run(1.0, [1.0, 1.0])]),  # no zoo row at 10
    ]
    (ratio,) = headline.ratios(rows)
    assert ratio["depth"] == 30 and ratio["versus"] == "pytorch"
    assert ratio["ours"] == "highway_zoo"
    assert ratio["total_time"] == pytest.approx(0.5)
    assert ratio["steady_steps_per_s"] == pytest.approx(2.0)


def test_memory_slope_per_layer_per_example():
    rows = [headline.summarise("highway_zoo", d, [_run(1.0, [1.0], mem=m)])
            for d, m in [(100, 110.0), (1000, 200.0)]]
    memory = headline.memory_per_layer(rows, batch_size=128)
    # 90 MB over 900 layers and 128 examples; no other backend's row, no slope for it
    assert set(memory) == {"highway_zoo"}
    assert memory["highway_zoo"]["bytes_per_layer_per_example"] == pytest.approx(
        90 * 2**20 / 900 / 128)


def test_wide_flop_count_matches_the_layer_sizes():
    # forward: stem 784x8, 2 blocks of 8x16, head 8x10, batch 4; backward twice forward,
    # without the stem's input gradient
    forward = 2 * 4 * (784 * 8 + 2 * 8 * 16 + 8 * 10)
    assert wide.train_flops(4, 8, 2) == 3 * forward - 2 * 4 * 784 * 8


def test_tiny_headline_run_end_to_end(tmp_path):
    out = tmp_path / "headline.json"
    assert headline.main(["--depths", "2", "--implementations", "numpy,highway_zoo",
                          "--repeats", "1", "--epochs", "2", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    rows = {r["implementation"]: r for r in summary["results"]}
    assert set(rows) == {"numpy", "highway_zoo"}
    for row in rows.values():
        (run,) = row["runs"]
        assert run["steps"] == 2 * 32 and len(run["epoch_s"]) == 2  # 4,000 images, batch 128
        assert 0 < row["to_first_step_s"] <= row["total_s"]
        assert 0.0 <= row["test_accuracy"] <= 1.0 and row["train_mem_mb"] >= 0
    # both nets have the same parameters: the same experiment
    assert rows["numpy"]["params"] == rows["highway_zoo"]["params"]
    assert summary["ratios"][0]["versus"] == "numpy"


@pytest.mark.slow
@pytest.mark.backends
def test_headline_runs_highway_zoo_on_every_backend(tmp_path):
    """A row per Keras backend, each in a process on that backend; the cached JAX row's
    measured run starts with the compilation cache its unmeasured first run filled."""
    out = tmp_path / "headline.json"
    # (TensorFlow's row: the tiny end-to-end run above)
    names = ["highway_zoo_jax", "highway_zoo_jax_cached", "highway_zoo_torch"]
    assert headline.main(["--depths", "2", "--implementations", ",".join(["numpy", *names]),
                          "--repeats", "1", "--epochs", "1", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    rows = {r["implementation"]: r for r in summary["results"]}
    assert set(rows) == {"numpy", *names}
    assert len({row["params"] for row in rows.values()}) == 1  # the same net everywhere
    for name, backend in zip(names, ["jax", "jax", "torch"]):
        assert 0.0 <= rows[name]["test_accuracy"] <= 1.0
        assert rows[name]["runs"][0]["backend"] == backend
    (cached,) = rows["highway_zoo_jax_cached"]["runs"]
    (cold,) = rows["highway_zoo_jax"]["runs"]
    assert cached["compilation_cache_entries_at_start"] > 0
    assert cold["compilation_cache_entries_at_start"] == 0
    assert {(q["ours"], q["versus"]) for q in summary["ratios"]} == {
        (name, "numpy") for name in names}


def test_per_layer_graphs_are_skipped_beyond_the_limit(tmp_path):
    out = tmp_path / "h.json"
    headline.main(["--depths", "3", "--implementations", "numpy,keras_per_layer",
                   "--max-graph-depth", "2", "--repeats", "1", "--epochs", "1",
                   "--max-steps", "1", "--out", str(out)])
    summary = json.loads(out.read_text())
    assert [r["implementation"] for r in summary["results"]] == ["numpy"]
    assert summary["skipped"][0]["implementation"] == "keras_per_layer"
    assert "max-graph-depth" in summary["skipped"][0]["reason"]


def test_bad_names_are_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit) as refused:
        headline.main(["--implementations", "numpy,jax"])
    assert refused.value.code == 2
    assert "unknown implementation" in capsys.readouterr().err
    with pytest.raises(ValueError, match="headline"):
        suite.run(only=["nope"])
    with pytest.raises(SystemExit) as refused:  # the command line's argparse choices
        cli_main(["bench", "--only", "nope"])
    assert refused.value.code == 2
    assert "choose from headline" in capsys.readouterr().err


def _installed_without_the_benchmarks(tmp_path):
    """The command line as the wheel installs it: a copy of the `highway_zoo` package in a
    site directory of its own, no `benchmarks/` beside it; run from a directory outside the
    repository, with PYTHONPATH naming only that site (the other packages come from the
    project's install, which maps no `benchmarks`)."""
    import highway_zoo

    site = tmp_path / "site"
    shutil.copytree(os.path.dirname(highway_zoo.__file__), site / "highway_zoo",
                    ignore=shutil.ignore_patterns("__pycache__"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return elsewhere, {**env, "PYTHONPATH": str(site)}


@pytest.mark.parametrize("argv", [["bench", "--only", "headline"], ["bench", "--help"]])
def test_bench_from_the_wheel_says_where_the_benchmarks_are(argv, tmp_path):
    cwd, env = _installed_without_the_benchmarks(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "highway_zoo", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "highway-zoo bench: error: the benchmarks are not installed with the package: they "
        "live in the repository's benchmarks/ folder; run the command from a clone of the "
        "repository (pip install -e . there)"], proc.stderr
    assert proc.stdout == "" and not list(cwd.iterdir())  # nothing run, nothing written
    # The check is real: the same copy beside a benchmarks/ folder (a clone) finds it.
    shutil.copytree(suite.RESULTS.parent, tmp_path / "site" / "benchmarks",
                    ignore=shutil.ignore_patterns("__pycache__", "results"))
    found = subprocess.run([sys.executable, "-m", "highway_zoo", "bench", "--help"], cwd=cwd,
                           env=env, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0 and "--only" in found.stdout, found.stderr


def test_bench_from_a_clone_runs_wherever_it_is_started(tmp_path):
    """An editable install (this checkout): the benchmarks are found beside the package, from
    a working directory outside the repository and with no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "highway_zoo", "bench", "--only", "nope"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "choose from headline" in proc.stderr, proc.stderr


def test_start_up_runs_deep_per_layer_graphs_once_and_on_tensorflow_only():
    configs, skip = start_up.plan([2, 4], ["tensorflow", "jax"], max_graph_depth=3)
    assert set(configs) == {(b, p, d) for b in ("tensorflow", "jax") for p in start_up.PATHS
                            for d in (2, 4)} - {("jax", "per_layer", 4)}
    skipped = {key for key in configs if skip(key, 1)}
    assert skipped == {("tensorflow", "per_layer", 4)}
    assert not any(skip(key, 0) for key in configs)


@pytest.mark.slow
@pytest.mark.backends
def test_start_up_runs_on_the_backend_asked_for(tmp_path):
    out = tmp_path / "start_up.json"
    assert start_up.main(["--backends", "jax", "--depths", "4", "--repeats", "1",
                          "--max-graph-depth", "3", "--steps", "1", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    # the backend is the one Keras reported in each child; no per-layer graph past the limit
    rows = {(r["backend"], r["path"], r["depth"]): r for r in summary["results"]}
    assert set(rows) == {("jax", "stack", 4), ("jax", "stack_autodiff", 4)}
    assert len({row["params"] for row in rows.values()}) == 1  # the same net every way
    assert summary["ratios"]["jax"]["steps_per_s_stack_vs_stack_autodiff_depth4"] > 0


@pytest.mark.slow
def test_trial_memory_records_every_trial_with_and_without_the_release(tmp_path):
    out = tmp_path / "trial_memory.json"
    assert trial_memory.main(["--depths", "3", "--trials", "2", "--out", str(out)]) == 0
    rows = {r["mode"]: r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == set(trial_memory.MODES)
    for row in rows.values():  # the tuner entered the recording block once per trial
        assert row["trials"] == 2 and len(row["rss_after_trial_mb"]) == 2
        assert row["rss_first_mb"] == row["rss_after_trial_mb"][0] > 100  # TensorFlow's


def test_a_failed_measurement_names_its_command_and_error():
    from benchmarks.driver import MeasurementFailed, run_child

    with pytest.raises(MeasurementFailed, match=r"benchmarks.headline --child .* exited with "
                       r"status 1: .*no-such-file.npz"):
        run_child("benchmarks.headline", {"name": "numpy", "depth": 2,
                                          "data_file": "no-such-file.npz", "options": {}})


# -- the driver ------------------------------------------------------------------------------

TOY = '''
import sys
import time

from benchmarks import driver


def measure(kind, value=1.5):
    print("progress output before the result")
    if kind == "fail":
        print("an earlier error line", file=sys.stderr)
        raise ValueError("the child's last error line")
    if kind == "sleep":
        import os
        from pathlib import Path

        Path("sleeping.pid").write_text(str(os.getpid()))
        time.sleep(60)
    if kind == "silent":
        sys.exit(0)
    if kind == "environment":
        import os

        return {name: os.environ.get(name) for name in
                ("KERAS_BACKEND", "JAX_COMPILATION_CACHE_DIR")}
    return {"kind": kind, "value": value}


if __name__ == "__main__":
    sys.exit(driver.main(driver.parser("toy_bench", "A toy benchmark."), None, measure,
                         lambda args: 0))
'''


@pytest.fixture
def toy(tmp_path):
    """A benchmark module, toy_bench, in tmp_path (its children run there)."""
    (tmp_path / "toy_bench.py").write_text(TOY)
    return tmp_path


def test_a_child_result_is_its_last_stdout_line(toy):
    assert driver.run_child("toy_bench", {"kind": "ok", "value": 2}, cwd=toy) == {
        "kind": "ok", "value": 2}


def test_a_child_runs_on_its_backend_and_compiles_afresh_unless_given_a_cache(
        toy, monkeypatch):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(toy / "users-cache"))  # as the CLI sets
    assert driver.run_child("toy_bench", {"kind": "environment"}, cwd=toy, backend="jax") == {
        "KERAS_BACKEND": "jax", "JAX_COMPILATION_CACHE_DIR": ""}
    cache = jax_cache.environment(str(toy / "bench-cache"))
    assert driver.run_child("toy_bench", {"kind": "environment"}, cwd=toy, env=cache) == {
        "KERAS_BACKEND": "tensorflow", "JAX_COMPILATION_CACHE_DIR": str(toy / "bench-cache")}


def test_a_failing_child_raises_measurement_failed_with_its_last_error_line(toy):
    with pytest.raises(driver.MeasurementFailed) as failed:
        driver.run_child("toy_bench", {"kind": "fail"}, cwd=toy)
    message = str(failed.value)
    assert "\n" not in message
    assert "exited with status 1: ValueError: the child's last error line" in message
    assert "an earlier error line" not in message
    # the command it names runs the same measurement by hand
    command = shlex.split(message.split("`")[1])
    assert command[:4] == ["python", "-m", "toy_bench", "--child"]
    assert json.loads(command[4]) == {"kind": "fail"}


def test_a_child_past_its_limit_or_without_a_result_fails_in_one_line(toy):
    with pytest.raises(driver.MeasurementFailed, match=r"toy_bench .*ran past its limit of 2 s"):
        driver.run_child("toy_bench", {"kind": "sleep"}, timeout=2, cwd=toy)
    # Stopped at its limit, not waited for: the child is gone (killed and reaped).
    with pytest.raises(ProcessLookupError):
        os.kill(int((toy / "sleeping.pid").read_text()), 0)
    with pytest.raises(driver.MeasurementFailed, match="printed no JSON result on its last line: "
                       "'progress output before the result'"):
        driver.run_child("toy_bench", {"kind": "silent"}, cwd=toy)


def test_a_timed_process_runs_as_it_is_and_fails_in_one_line(tmp_path):
    code = ("import os, sys; print(os.getcwd(), os.environ['TOY_SETTING']); "
            "sys.exit(int(sys.argv[1]))")
    wall, out = driver.timed_process([sys.executable, "-c", code, "0"], {"TOY_SETTING": "x"},
                                     cwd=tmp_path)
    assert out == f"{tmp_path} x\n" and 0 < wall < 60
    with pytest.raises(driver.MeasurementFailed) as failed:
        driver.timed_process([sys.executable, "-c", code, "3"], {"TOY_SETTING": "y"})
    message = str(failed.value)
    assert "\n" not in message and message.startswith("`TOY_SETTING=y ")
    assert "exited with status 3: no error output" in message


def test_interleaved_runs_every_key_per_repeat_and_skips_what_it_is_told(capsys):
    calls = []

    def measure(key):
        calls.append(key)
        return {"n": len(calls)}

    runs = driver.interleaved(["a", "b", "c"], 3, measure,
                              describe=lambda key, run: f"{key} run {run['n']}",
                              skip=lambda key, repeat: key == "c" and repeat > 0)
    assert calls == ["a", "b", "c", "a", "b", "a", "b"]
    assert runs == {"a": [{"n": 1}, {"n": 4}, {"n": 6}], "b": [{"n": 2}, {"n": 5}, {"n": 7}],
                    "c": [{"n": 3}]}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[1/7] a run 1 (") and lines[-1].startswith("[7/7] b run 7 (")


def test_medians_and_table_from_known_numbers():
    runs = [{"a": 3.0, "b": 10.0}, {"a": 1.0, "b": 40.0}, {"a": 2.5, "b": 20.0},
            {"a": 7.0, "b": 30.0}]
    assert driver.medians(runs, ("a", "b")) == {"a": statistics.median([3.0, 1.0, 2.5, 7.0]),
                                                "b": statistics.median([10.0, 40.0, 20.0, 30.0])}
    assert driver.medians(runs, ("a",)) == {"a": 2.75}  # the mean of the middle two
    assert driver.medians(runs[:3], ("a",), digits=0) == {"a": 2.0}
    assert driver.median_of(runs, lambda r: r["b"] / r["a"]) == statistics.median(
        [10 / 3, 40.0, 8.0, 30 / 7])
    assert driver.table(["name", "x", "note"], [":---", "---:", "---"],
                        [["a", f"{2.75:.1f}", "ok"], ["b", 3, ""]]) == (
        "| name | x | note |\n| :--- | ---: | --- |\n| a | 2.8 | ok |\n| b | 3 | |")


def test_results_are_written_whole_with_machine_and_date(tmp_path):
    out = tmp_path / "deeper" / "x.json"
    driver.write_results(out, {"results": [1, 2]})
    written = json.loads(out.read_text())
    assert list(written) == ["machine", "date", "results"]
    assert written["date"] == time.strftime("%Y-%m-%d") and "cores" in written["machine"]
    assert [p.name for p in out.parent.iterdir()] == ["x.json"]  # no temporary file left


@pytest.mark.parametrize("name", suite.SCRIPTS)
def test_every_script_runs_through_the_driver(name, monkeypatch):
    module = importlib.import_module(f"benchmarks.{name}")
    p = module.parser()
    assert p.prog == f"python -m benchmarks.{name}"
    assert p.parse_args([]).out == suite.RESULTS / f"{name}.json"  # the suite passes --out
    # main hands its arguments, its measure and its run to the driver (which serves --child).
    seen = {}
    monkeypatch.setattr(driver, "main", lambda p, argv, measure, run: seen.update(
        prog=p.prog, argv=argv, measure=measure, run=run) or 7)
    assert module.main(["--repeats", "1"]) == 7
    assert seen["prog"] == p.prog and seen["argv"] == ["--repeats", "1"]
    assert seen["measure"] is module.measure and seen["run"] is module.run
    source = importlib.util.find_spec(module.__name__).loader.get_source(module.__name__)
    assert "subprocess" not in source and "--child" not in source  # only the driver's
    # the quick set runs every script too, and every entry's arguments parse
    assert name in {script for script, _, _ in suite.QUICK}
    for script, _, args in suite.QUICK + suite.FULL + suite.GPU:
        if script == name:
            p.parse_args(args)


def test_the_suite_writes_one_results_file_per_entry():
    for plan in (suite.QUICK, suite.FULL, suite.GPU):
        assert len({result for _, result, _ in plan}) == len(plan)
    # the GPU set's results sit beside the CPU ones and never replace them
    gpu = {result for _, result, _ in suite.GPU}
    assert all(r.startswith("gpu_") for r in gpu)
    assert not gpu & {result for _, result, _ in suite.FULL}


def _fake_nvidia_smi(directory, names):
    """An `nvidia-smi` on PATH that lists `names` as `--query-gpu=name` does."""
    script = directory / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + "".join(f"echo '{n}'\n" for n in names))
    script.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ['PATH']}"


def test_the_gpu_set_needs_a_gpu_and_names_it_in_every_result(tmp_path, monkeypatch):
    # This machine has no NVIDIA GPU (CI neither): refused in one line, nothing written.
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    assert driver.gpu_names() == []
    with pytest.raises(ValueError, match="needs an NVIDIA GPU"):
        suite.run(gpu=True, out_dir=tmp_path / "out")
    with pytest.raises(ValueError, match="choose one"):
        suite.run(gpu=True, full=True, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # Where nvidia-smi lists GPUs, the machine line names them (a real child process).
    monkeypatch.setenv("PATH", _fake_nvidia_smi(tmp_path, ["NVIDIA H200", "NVIDIA H200"]))
    assert driver.gpu_names() == ["NVIDIA H200", "NVIDIA H200"]
    assert driver.machine().endswith(", NVIDIA H200, NVIDIA H200")


def test_a_gpu_row_keeps_its_device_and_float32_settings():
    precision = {"jax_default_matmul_precision": None}
    runs = [{"backend": "jax", "params": 7, "first_train_step_s": 1.0,
             "train_images_per_s": v, "inference_images_per_s": 2 * v, "batch_size": 128,
             "input_shape": [8, 8, 3], "forward_flops_per_image": 1e9, "conv_gflops": 1e5,
             "device": "NVIDIA H200", "float32_precision": precision,
             "reference_conv": [128, 56, 56, 128, 128]} for v in (100.0, 300.0, 200.0)]
    row = conv.summarise("net", runs)
    assert row["device"] == "NVIDIA H200" and row["float32_precision"] == precision
    assert row["reference_conv"] == [128, 56, 56, 128, 128]
    assert row["train_images_per_s"] == 200.0
    assert "| net | jax | NVIDIA H200 | 128 |" in conv.format_table([row])


# -- conv: FLOPs, GFLOP/s, the ImageNet nets -------------------------------------------------


def test_conv_flops_are_counted_from_the_kernels_by_hand():
    import keras

    from layers import HighwayConv2D

    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Conv2D(4, 3, padding="same")(inputs)  # 8x8 out
    x = HighwayConv2D(3)(x)  # [H | T]: a (3, 3, 4, 8) kernel, 8x8 out
    x = keras.layers.Conv2D(5, 3, strides=2)(x)  # 3x3 out
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(10)(x)
    model = keras.Model(inputs, outputs)
    by_hand = (2 * 3 * 3 * 3 * 4 * 8 * 8 + 2 * 3 * 3 * 4 * 8 * 8 * 8 + 2 * 3 * 3 * 4 * 5 * 3 * 3
               + 2 * 45 * 10)
    assert conv.forward_flops(model) == by_hand
    # a model inside a model is counted through
    outer = keras.Sequential([keras.Input((8, 8, 3)), model])
    assert conv.forward_flops(outer) == by_hand


def test_flops_count_every_convolution_inside_a_bn_highway_block():
    import keras

    from layers import BNHighwayBlock

    inputs = keras.Input((8, 8, 4))
    # Strided, 4 -> 6 channels: H and T two 3x3 convs each, a 1x1 projection shortcut; 4x4 out
    outputs = BNHighwayBlock(6, kernel_sizes=(3, 3), strides=2)(inputs)
    model = keras.Model(inputs, outputs)
    per_position = 2 * (3 * 3 * 4 * 6 + 3 * 3 * 6 * 6) * 2 + 2 * 1 * 1 * 4 * 6
    assert conv.forward_flops(model) == per_position * 4 * 4


def test_resnet50_flops_match_he_et_al():
    import zoo

    # He et al. 2015, Table 1: ResNet-50 is 3.8 x 10^9 multiply-adds (their "FLOPs")
    assert conv.forward_flops(zoo.load("resnet50_imagenet")) == pytest.approx(2 * 3.8e9,
                                                                             rel=0.03)


def test_conv_summary_gflops_and_fractions_of_the_convolution_rate():
    def run(train, infer, rate):
        return {"backend": "tensorflow", "params": 7, "first_train_step_s": 1.0,
                "train_images_per_s": train,
                "inference_images_per_s": infer, "batch_size": 32, "input_shape": [8, 8, 3],
                "forward_flops_per_image": 1e9, "conv_gflops": rate}

    runs = [run(10.0, 40.0, 100.0), run(20.0, 30.0, 50.0), run(30.0, 60.0, 60.0)]
    row = conv.summarise("net", runs)
    assert row["train_flops_per_image"] == 3e9
    assert row["train_images_per_s"] == 20.0 and row["conv_gflops"] == 60.0
    assert row["train_gflops"] == statistics.median([30.0, 60.0, 90.0])
    assert row["inference_gflops"] == statistics.median([40.0, 30.0, 60.0])
    # the fraction is each run's against its own convolution rate, then the median
    assert row["train_fraction_of_conv"] == statistics.median([0.3, 1.2, 1.5])
    assert row["inference_fraction_of_conv"] == statistics.median([0.4, 0.6, 1.0])
    assert ("| net | tensorflow | CPU | 32 | 7 | 1 | 1.00 | 20.0 | 60.0 | 40.0 | 40.0 | 60 | "
            "120% | 60% |") in conv.format_table([row])


def test_conv_models_take_a_batch_each_and_bad_ones_are_refused(capsys):
    assert conv.parser().parse_args([]).models[2:] == [
        "resnet50_imagenet:32", "highway50_imagenet:32", "highway_full50_imagenet:32"]
    with pytest.raises(SystemExit) as refused:
        conv.main(["--models", "resnet50_imagenet:big"])
    assert refused.value.code == 2 and "NAME:BATCH" in capsys.readouterr().err


@pytest.mark.slow
def test_imagenet_conv_rows_on_a_tiny_configuration(tmp_path):
    out = tmp_path / "conv.json"
    assert conv.main(["--models", "resnet50_imagenet:2", "--input-size", "32", "--steps", "1",
                      "--repeats", "1", "--backends", "tensorflow", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    (row,) = summary["results"]
    assert row["model"] == "resnet50_imagenet" and row["batch_size"] == 2
    assert row["input_shape"] == [32, 32, 3] and summary["settings"]["input_size"] == 32
    for key in ("train_images_per_s", "inference_images_per_s", "train_gflops",
                "inference_gflops", "conv_gflops", "train_fraction_of_conv",
                "inference_fraction_of_conv", "first_train_step_s"):
        assert math.isfinite(row[key]) and row[key] > 0, key
    assert row["train_flops_per_image"] == 3 * row["forward_flops_per_image"] > 0
    assert row["runs"][0]["train_steps"] == row["runs"][0]["inference_steps"] == 1


@pytest.mark.backends
def test_conv_rows_on_another_backend_against_its_own_convolution(tmp_path):
    out = tmp_path / "conv.json"
    assert conv.main(["--models", "highway_conv16_mnist:4", "--steps", "1", "--repeats", "1",
                      "--backends", "torch", "--out", str(out)]) == 0
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert set(rows) == {"torch"}  # as Keras in the child reported
    for row in rows.values():
        assert row["conv_gflops"] > 0 and row["train_fraction_of_conv"] > 0


@pytest.mark.backends
@pytest.mark.parametrize("framework", ["numpy", "tensorflow", "jax", "torch"])
def test_reference_kernels_compute_the_same_products(framework):
    """The matmul and the 3x3 convolution each backend's speed is compared with compute what
    NumPy computes (PyTorch's convolution in its own NCHW layout)."""
    import numpy as np

    from benchmarks import backends

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s).astype(np.float32) for s in [(4, 6), (6, 12)])
    np.testing.assert_allclose(np.asarray(backends.matmul_call(framework, a, b)()), a @ b,
                               rtol=1e-5, atol=1e-5)
    if framework == "numpy":
        return
    x = rng.standard_normal((2, 5, 5, 3)).astype(np.float32)
    w = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    expected = sum(np.einsum("nhwc,co->nhwo", padded[:, i:i + 5, j:j + 5], w[i, j])
                   for i in range(3) for j in range(3))
    got = np.asarray(backends.conv_call(framework, x, w)())
    if framework == "torch":
        got = got.transpose(0, 2, 3, 1)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert backends.conv_gflops(framework, (1, 4, 4, 2, 2), repeats=1) > 0


# -- the input pipeline ----------------------------------------------------------------------


@pytest.mark.slow
def test_pipeline_runs_through_the_driver(tmp_path):
    out = tmp_path / "pipeline.json"
    assert pipeline.main(["--models", "highway_fc50_mnist:128", "--repeats", "1", "--epochs",
                          "1", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert {"machine", "date", "tensorflow", "repeats", "epochs", "results"} <= set(summary)
    (row,) = summary["results"]
    assert row["model"] == "highway_fc50_mnist" and row["batch_size"] == 128
    assert row["steps_per_s_pipeline"] > 0 and row["steps_per_s_cached_batch"] > 0
    assert row["pipeline_over_cached"] > 0 and "tensorflow" not in row
    assert len(row["all"]["pipeline"]) == 1


# -- whole processes: highway-zoo train against the NumPy script -----------------------------


def _whole(wall, process_s=None, keras=None, **extra):
    phases = {"data": 0.5, **({"keras": keras} if keras is not None else {})}
    timeline = {"phases_s": phases, **({"process_s": process_s} if process_s else {})}
    return {"wall_s": wall, "timeline": timeline, "test_accuracy": 0.9, "final_loss": 0.1,
            "params": 100, **extra}


def test_whole_process_ratios_come_from_the_same_repeat_and_the_breakdown_from_the_median():
    runs = {("python", ""): [{"wall_s": 0.05}] * 3,
            ("import_keras", "jax"): [{"wall_s": w} for w in (2.0, 3.0, 2.0)],
            ("numpy", ""): [_whole(w) for w in (1.0, 2.0, 1.5)],
            # Keras's import as each run records it (its "keras" phase)
            ("train", "jax"): [_whole(w, w - 0.5, keras=k) for w, k in ((3.0, 2.0), (6.0, 2.5),
                                                                         (3.5, 2.0))],
            ("train_cold", "jax"): [_whole(w, w - 0.5, keras=2.0) for w in (5.0, 7.0, 6.0)]}
    rows = {(r["process"], r["backend"]): r for r in whole_process.summarise(runs)}
    warm = rows[("train", "jax")]
    assert warm["wall_s"] == 3.5
    assert warm["vs_numpy"] == pytest.approx(statistics.median([3.0, 3.0, 3.5 / 1.5]))
    # beyond the `import keras` process of the same repeat: 1.0, 3.0, 1.5
    assert warm["beyond_keras_s"] == pytest.approx(1.5)
    assert warm["beyond_keras_vs_numpy"] == pytest.approx(1.0)  # 1.0, 1.5, 1.0
    # beyond the run's own Keras import: 1.0, 3.5, 1.5; over NumPy: 1.0, 1.75, 1.0
    assert warm["beyond_keras_in_run_s"] == pytest.approx(1.5)
    assert warm["beyond_keras_in_run_vs_numpy"] == pytest.approx(1.0)
    assert warm["beyond_keras_in_run_vs_numpy_range"] == pytest.approx([1.0, 1.75])
    # the breakdown of the median run (3.5 s): its phases, and its exit after its last record
    assert warm["breakdown"] == {"data": 0.5, "keras": 2.0, "exit": pytest.approx(0.5)}
    assert warm["breakdown_wall_s"] == 3.5
    assert "breakdown" not in rows[("import_keras", "jax")]
    goals = whole_process.goals(list(rows.values()))
    assert goals["fastest_backend"] == "jax" and goals["fastest_met"]  # at most 1x
    # the first run beyond its own import: 3.0, 5.0, 4.0 s; over NumPy 3.0, 2.5, 4.0 / 1.5
    assert goals["jax_first_run_beyond_keras_vs_numpy"] == pytest.approx(statistics.median(
        [3.0, 2.5, 4.0 / 1.5])) and not goals["jax_first_run_met"]  # more than 2x
    tables = whole_process.format_tables(list(rows.values()), goals)
    assert ("| highway-zoo train (jax, cache warm) | 3.50 | 3.00x | 1.50 | 1.00x | 1.50 | 1.00x "
            "| 0.900 |") in tables
    assert "(repeats 2.50-3.00x; at most 2x: not met)" in tables
    assert "the NumPy script (repeats 1.00-1.75x; at most 1x: met)" in tables
    # Runs that recorded no phases (a process without /proc) get the cross-check only.
    runs[("train", "jax")] = [_whole(w) for w in (3.0, 6.0, 3.5)]
    (plain,) = [r for r in whole_process.summarise(runs) if r["process"] == "train"]
    assert "beyond_keras_in_run_s" not in plain and plain["beyond_keras_s"] == 1.5


def test_whole_process_plan_times_jax_with_its_cache_warm_and_empty():
    assert whole_process.plan(["tensorflow", "jax"]) == [
        ("python", ""), ("import_keras", "tensorflow"), ("import_keras", "jax"), ("numpy", ""),
        ("train", "tensorflow"), ("train", "jax"), ("train_cold", "jax")]
    assert whole_process.train_command(30, 12, "DIR")[2:] == [
        "highway_zoo.cli", "train", "highway_fc10_mnist", "--depth", "30", "--stacked",
        "--epochs", "12", "--out", "DIR"]


@pytest.mark.slow
def test_whole_process_tiny_run_end_to_end(tmp_path):
    out = tmp_path / "whole_process.json"
    assert whole_process.main(["--backends", "tensorflow", "--repeats", "1", "--depth", "3",
                               "--epochs", "1", "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    rows = {r["label"]: r for r in summary["results"]}
    assert list(rows) == ["python -c pass", "import keras (tensorflow)", "NumPy script",
                          "highway-zoo train (tensorflow)"]
    numpy, ours = rows["NumPy script"], rows["highway-zoo train (tensorflow)"]
    assert numpy["params"] == ours["params"]  # the same network
    assert list(ours["breakdown"]) == list(whole_process.PHASES)
    assert list(numpy["breakdown"]) == ["interpreter", "imports", "data", "build", "compile",
                                        "training", "evaluation", "exit"]
    for row in (numpy, ours):
        assert all(seconds >= 0 for seconds in row["breakdown"].values()), row["breakdown"]
        assert sum(row["breakdown"].values()) == pytest.approx(row["wall_s"], abs=1e-3)
        assert 0.0 <= row["test_accuracy"] <= 1.0
    assert ours["beyond_keras_s"] == pytest.approx(
        ours["wall_s"] - rows["import keras (tensorflow)"]["wall_s"])
    assert ours["beyond_keras_in_run_s"] == pytest.approx(
        ours["wall_s"] - ours["breakdown"]["keras"])
    assert summary["goals"]["fastest_backend"] == "tensorflow"


def test_quantization_latency_takes_the_forms_in_turn_round_by_round():
    # The four forms of a model are timed in alternation, so a burst of other work on the
    # machine falls on all of them: every form gets its calls in every round, in order.
    from benchmarks import quantization

    calls = []
    forms = {form: (lambda x, form=form: calls.append((form, x)), [0, 1, 2])
             for form in ("keras_float", "keras_int8", "tflite_float", "tflite_int8")}
    medians = quantization._median_ms(forms, calls=8, rounds=4)
    assert set(medians) == set(forms) and all(v >= 0 for v in medians.values())
    warmup, timed = calls[:4 * quantization.WARMUP_CALLS], calls[4 * quantization.WARMUP_CALLS:]
    assert [f for f, _ in warmup] == [f for f in forms for _ in range(quantization.WARMUP_CALLS)]
    assert [f for f, _ in timed] == [f for _ in range(4) for f in forms for _ in range(2)]
    assert [x for _, x in timed[:2]] == [0, 1]  # the inputs in turn


@pytest.mark.parametrize("name", ["highway_conv16_mnist", "highway_a_cifar10",
                                  "highway_cifar10"])
def test_the_pytorch_twin_computes_the_zoo_nets_function(name):
    """The plain-PyTorch peer of conv_peer: the same parameter count, and with the Keras
    net's weights the same logits (inference mode) on raw pixels."""
    import keras
    import numpy as np
    import torch

    import zoo
    from benchmarks.implementations import torch_conv_highway

    model = zoo.load(name)
    net = torch_conv_highway.build(name)
    assert sum(p.numel() for p in net.parameters()) == model.count_params()
    torch_conv_highway.load_keras_weights(net, model).eval()
    x = np.random.default_rng(0).uniform(0, 255, (3, *model.input_shape[1:])).astype("float32")
    want = keras.ops.convert_to_numpy(
        keras.Model(model.inputs, model.get_layer("logits").output)(x))
    got = net(torch.as_tensor(x).permute(0, 3, 1, 2)).detach().numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    with pytest.raises(ValueError, match="has no PyTorch twin"):
        torch_conv_highway.build("highway_fc10_mnist")


def test_conv_peer_reports_both_implementations_and_their_ratio(tmp_path):
    out = tmp_path / "conv_peer.json"
    assert conv_peer.main(["--models", "highway_conv16_mnist", "--steps", "2", "--warmup", "1",
                           "--repeats", "1", "--batch-size", "8", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    ours, theirs = row["runs"]["highway_zoo"][0], row["runs"]["pytorch"][0]
    assert len(ours["step_s"]) == len(theirs["step_s"]) == 2 and theirs["framework"].startswith(
        "torch")
    assert row["ratio"] == pytest.approx(
        ours["train_images_per_s"] / theirs["train_images_per_s"])
    assert ours["train_images_per_s"] == pytest.approx(8 / statistics.median(ours["step_s"]))


# -- conv_precision: float32 and bfloat16 against PyTorch in one run (issue 72) --------------

PRECISION_TIMINGS = {  # (precision, implementation): each repeat's step times, batch 10
    ("float32", "highway_zoo"): [[0.10, 0.12, 0.11], [0.20, 0.10, 0.10], [0.09, 0.09, 0.30]],
    ("float32", "pytorch"): [[0.09, 0.09, 0.10], [0.08, 0.09, 0.09], [0.08, 0.08, 0.08]],
    ("mixed_bfloat16", "highway_zoo"): [[0.05, 0.06, 0.05], None, [0.04, 0.07, 0.06]],
    ("mixed_bfloat16", "pytorch"): [[0.08, 0.07, 0.09], [0.06, 0.06, 0.05], [0.07, 0.07, 0.08]],
}


def _precision_runs(batch=10, timings=PRECISION_TIMINGS):
    """Runs as the children return them; None: that repeat's run failed."""
    return {key: [{"error": "`python -m ...` ran past its limit of 900 s"} if steps is None
                  else {"step_s": steps, "train_images_per_s": batch / statistics.median(steps)}
                  for steps in repeats] for key, repeats in timings.items()}


def test_conv_precision_ratios_and_speedups_match_numpy_on_fixed_timings():
    import numpy as np

    from benchmarks import conv_precision

    row = conv_precision.summarise("net", _precision_runs(), params=7)
    # images/s per repeat: the batch over the median step, in NumPy
    ips = {key: np.array([np.nan if s is None else 10 / np.median(s) for s in repeats])
           for key, repeats in PRECISION_TIMINGS.items()}
    for (precision, implementation), values in ips.items():
        cell, ok = row["images_per_s"][precision][implementation], values[~np.isnan(values)]
        assert cell["median"] == pytest.approx(np.median(ok))
        assert (cell["min"], cell["max"], cell["n"]) == pytest.approx(
            (ok.min(), ok.max(), len(ok)))
    for precision in conv_precision.PRECISIONS:  # highway-zoo / PyTorch within each repeat
        ratios = ips[(precision, "highway_zoo")] / ips[(precision, "pytorch")]
        ratios = ratios[~np.isnan(ratios)]
        got = row["highway_zoo_over_pytorch"][precision]
        assert (got["median"], got["min"], got["max"], got["n"]) == pytest.approx(
            (np.median(ratios), ratios.min(), ratios.max(), len(ratios)))
        assert row["goal_met"][precision] == (np.median(ratios) >= 1.0)
    for implementation in conv_precision.IMPLEMENTATIONS:  # bfloat16 / float32 per framework
        speedups = ips[("mixed_bfloat16", implementation)] / ips[("float32", implementation)]
        speedups = speedups[~np.isnan(speedups)]
        got = row["bf16_speedup"][implementation]
        assert (got["median"], got["min"], got["max"], got["n"]) == pytest.approx(
            (np.median(speedups), speedups.min(), speedups.max(), len(speedups)))
    # the failed repeat is left out of its cell and of every ratio it is in, and named
    assert row["images_per_s"]["mixed_bfloat16"]["highway_zoo"]["n"] == 2
    assert row["highway_zoo_over_pytorch"]["float32"]["n"] == 3
    assert list(row["failures"]) == ["mixed_bfloat16/highway_zoo"]
    assert row["goal_met"] == {"float32": False, "mixed_bfloat16": True}
    tables = conv_precision.format_tables([row])
    f32 = ips[("float32", "highway_zoo")]
    assert (f"| `net` | float32 | {np.median(f32):,.0f} ({f32.min():,.0f}–{f32.max():,.0f}) |"
            in tables)
    assert "| not met |" in tables and "| met |" in tables


def test_conv_precision_cell_that_always_fails_is_reported_not_raised():
    from benchmarks import conv_precision

    timings = {**PRECISION_TIMINGS, ("mixed_bfloat16", "highway_zoo"): [None, None, None]}
    row = conv_precision.summarise("net", _precision_runs(timings=timings))
    assert row["images_per_s"]["mixed_bfloat16"]["highway_zoo"] is None
    assert row["highway_zoo_over_pytorch"]["mixed_bfloat16"] is None
    assert row["bf16_speedup"]["highway_zoo"] is None
    assert row["goal_met"]["mixed_bfloat16"] is None
    assert "| `net` | mixed_bfloat16 | failed |" in conv_precision.format_tables([row])


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile

processor\t: 1
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile
"""


def test_conv_precision_reads_the_cpu_and_its_bfloat16_flags(tmp_path):
    from benchmarks import conv_precision

    path = tmp_path / "cpuinfo"
    path.write_text(CPUINFO)
    cpu = conv_precision.cpu_info(path)
    assert cpu["model"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert cpu["flags"] == sorted("fpu sse2 avx avx2 fma avx512f avx512_bf16 amx_bf16 "
                                  "amx_tile".split())
    assert cpu["bf16_flags"]["avx512_bf16"] and cpu["bf16_flags"]["amx_bf16"]
    assert conv_precision.has_bf16_instructions(cpu)
    # CI's AVX2-only CPU: recorded as such, no bfloat16 instructions
    path.write_text("model name\t: AMD EPYC 7B12\nflags\t\t: fpu avx avx2 fma\n")
    cpu = conv_precision.cpu_info(path)
    assert cpu["model"] == "AMD EPYC 7B12" and cpu["bf16_flags"]["avx2"]
    assert not cpu["bf16_flags"]["avx512_bf16"] and not conv_precision.has_bf16_instructions(cpu)
    # no /proc/cpuinfo (not Linux): the platform's name, no flags
    cpu = conv_precision.cpu_info(tmp_path / "absent")
    assert cpu["model"] and cpu["flags"] == [] and not conv_precision.has_bf16_instructions(cpu)


def test_conv_precision_completes_and_records_a_cell_that_cannot_run(tmp_path, monkeypatch,
                                                                      capsys):
    """A CPU where bfloat16 fails (or runs past --timeout): the run still writes its JSON,
    table and figure, the cell says failed with its error line, and the exit status is 0; a
    failed float32 cell makes it 1."""
    from benchmarks import conv_precision

    results = _precision_runs(timings={k: [v[0]] for k, v in PRECISION_TIMINGS.items()})

    def run_child(module, spec, timeout=None, **kwargs):
        assert module == "benchmarks.conv_precision" and timeout == 900
        key = (spec["precision"], spec["implementation"])
        if key == ("mixed_bfloat16", "highway_zoo"):
            raise driver.MeasurementFailed("`python -m ...` exited with status 1: no bfloat16 "
                                           "Conv2D kernel on this CPU")
        return {**results[key][0], "model": spec["name"], **spec}

    monkeypatch.setattr(driver, "run_child", run_child)
    out = tmp_path / "conv_precision.json"
    assert conv_precision.main(["--models", "highway_conv16_mnist", "--repeats", "1",
                                "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]
    assert row["images_per_s"]["mixed_bfloat16"]["highway_zoo"] is None
    assert "no bfloat16 Conv2D kernel" in row["failures"]["mixed_bfloat16/highway_zoo"][0]
    text = (tmp_path / "conv_precision.md").read_text()
    assert "| `highway_conv16_mnist` | mixed_bfloat16 | failed |" in text
    assert "Failed runs (first error of each cell): `highway_conv16_mnist` " in text
    assert (tmp_path / "conv_precision.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "failed: `python -m" in capsys.readouterr().out  # the progress line says so

    def float32_fails(module, spec, timeout=None, **kwargs):
        raise driver.MeasurementFailed("broken")

    monkeypatch.setattr(driver, "run_child", float32_fails)
    assert conv_precision.main(["--models", "highway_conv16_mnist", "--repeats", "1",
                                "--out", str(out)]) == 1
    assert json.loads(out.read_text())["results"][0]["images_per_s"]["float32"][
        "pytorch"] is None


@pytest.mark.slow
def test_conv_precision_smoke_run_end_to_end(tmp_path):
    """Four fresh processes on the smallest net (a few steps, batch 8): well-formed JSON,
    the table marked as a smoke run, the figure; the arithmetic from the runs recorded."""
    from benchmarks import conv_precision

    out, page = tmp_path / "results" / "conv_precision.json", tmp_path / "page"
    assert conv_precision.main(["--models", "highway_conv16_mnist", "--steps", "2", "--warmup",
                                "1", "--repeats", "1", "--batch-size", "8", "--threads", "1",
                                "--out", str(out), "--page", str(page)]) == 0
    summary = json.loads(out.read_text())
    assert {"machine", "date", "command", "smoke", "cpu", "versions", "load_average",
            "settings", "results"} <= set(summary)
    assert summary["smoke"] is True and summary["settings"]["threads"] == 1
    assert summary["cpu"]["model"] and set(summary["cpu"]["bf16_flags"]) == set(
        conv_precision.BF16_FLAGS)
    assert summary["versions"]["tensorflow"] and summary["versions"]["torch"]
    (row,) = summary["results"]
    assert row["model"] == "highway_conv16_mnist" and row["params"] == 38986
    for key, (run,) in row["runs"].items():
        precision, implementation = key.split("/")
        assert run["precision"] == precision and run["implementation"] == implementation
        assert len(run["step_s"]) == 2 and run["batch_size"] == 8
        assert run["train_images_per_s"] == pytest.approx(8 / statistics.median(run["step_s"]))
        assert run["threads"]["intra_op"] == 1
        cell = row["images_per_s"][precision][implementation]
        assert cell["median"] == cell["min"] == cell["max"] == run["train_images_per_s"]
    runs = {key: run for key, (run,) in row["runs"].items()}
    for precision in conv_precision.PRECISIONS:
        assert row["highway_zoo_over_pytorch"][precision]["median"] == pytest.approx(
            runs[f"{precision}/highway_zoo"]["train_images_per_s"]
            / runs[f"{precision}/pytorch"]["train_images_per_s"])
    assert runs["mixed_bfloat16/pytorch"]["framework"].startswith("torch")
    text = (page / "conv_precision.md").read_text()
    assert "**Smoke run, not a measurement**" in text
    assert text.count("| `highway_conv16_mnist` |") == 3  # two precisions, one speed-up row
    assert f"({os.path.relpath(out, page)})" in text and "(conv_precision.png)" in text
    assert (page / "conv_precision.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert summary["command"].endswith(f"--threads 1 --out {out} --page {page}")
    # --redraw writes the table and the figure again from the JSON alone
    (page / "conv_precision.md").unlink()
    assert conv_precision.main(["--redraw", "--out", str(out), "--page", str(page)]) == 0
    assert (page / "conv_precision.md").read_text() == text


def test_conv_precision_links_from_the_sites_page_and_the_page_shows_no_smoke_run():
    """The benchmarks page includes docs/results/bench/conv_precision.md; the committed file
    links the results as the site copies them and is never a smoke run's."""
    from benchmarks import conv_precision

    bench = conv_precision.PAGE.parent / "bench"
    assert conv_precision._link(conv_precision.RESULTS, bench / "conv_precision.md") == (
        "data/bench/conv_precision.json")
    assert conv_precision._link(bench / "conv_precision.png",
                                bench / "conv_precision.md") == "bench/conv_precision.png"
    page = conv_precision.PAGE.read_text()
    assert '--8<-- "docs/results/bench/conv_precision.md"' in page
    assert "python -m benchmarks.conv_precision --page docs/results/bench" in page
    assert "Smoke run" not in (bench / "conv_precision.md").read_text()


@pytest.mark.parametrize("name", ["highway_conv32_mnist", "highway_b_cifar10",
                                  "highway_c_cifar10"])
def test_the_pytorch_twin_has_the_keras_nets_parameter_count(name):
    """conv_precision's nets beyond those whose function is compared above: the same count."""
    import zoo
    from benchmarks import conv_precision
    from benchmarks.implementations import torch_conv_highway

    assert name in conv_precision.MODELS
    net = torch_conv_highway.build(name)
    assert sum(p.numel() for p in net.parameters()) == zoo.load(name).count_params()
