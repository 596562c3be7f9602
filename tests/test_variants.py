"""The variants study (training/variants.py): width matching, and the study end to end on a
tiny budget producing its JSON, table and figure."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_training import separable_digits

import zoo
from highway_zoo import cli
from training.experiments.variants import matched_width, parameter_count, variants_study


def test_matched_widths_follow_the_stated_rule():
    # n · (w² + w) closest to a coupled width-50 layer's 5,100: the paper's 71-unit plain layer.
    assert {v: matched_width(v) for v in ("coupled", "c_only", "t_only", "full", "residual",
                                          "plain")} == {
        "coupled": 50, "c_only": 50, "t_only": 50, "full": 41, "residual": 71, "plain": 71}
    # The counts are the built nets' (and, for plain, the registered plain nets').
    assert parameter_count("plain", 10, 71) == zoo.describe("plain_fc10_mnist")["params"]
    for variant, width in (("full", 41), ("residual", 71), ("coupled", 50)):
        model = zoo.load("highway_fc10_mnist", depth=3, width=width, variant=variant,
                         stacked=True)
        assert model.count_params() == parameter_count(variant, 3, width)


def test_gated_skips_are_matched_by_their_own_layer_counts():
    # A coupled width-50 layer has 5,100 parameters. rezero 71² + 71 + 1 = 5,113 and laurel_rw
    # 5,114 (71 wins over 70's 4,971+); layerscale 70² + 2·70 = 5,040 beats 71's 5,183;
    # laurel_lr (rank w // 8) 64² + 64 + 2·64·8 = 5,184 beats 63's 4,914; gru_gate
    # 7·27² + 2·27 = 5,157 beats 26's 4,784.
    assert {v: matched_width(v) for v in ("rezero", "layerscale", "gru_gate", "laurel_rw",
                                          "laurel_lr")} == {
        "rezero": 71, "layerscale": 70, "gru_gate": 27, "laurel_rw": 71, "laurel_lr": 64}
    for variant, width in (("rezero", 71), ("layerscale", 70), ("gru_gate", 27),
                           ("laurel_rw", 71), ("laurel_lr", 64)):
        model = zoo.load("highway_fc10_mnist", depth=3, width=width, variant=variant,
                         stacked=True)
        assert model.count_params() == parameter_count(variant, 3, width)


def test_a_gated_skip_runs_in_the_study_beside_a_greff_variant(tmp_path):
    results = variants_study(["t_only", "rezero"], [3], 1, modes=["matched"],
                             dataset=separable_digits(n_train=128, n_test=50), epochs=1,
                             out=tmp_path / "study", isolate=False)
    rows = {r["variant"]: r for r in results["summary"]}
    assert rows["rezero"]["width"] == 71 and rows["t_only"]["width"] == 50
    (run,) = [r for r in results["runs"] if r["variant"] == "rezero"]
    assert run["overrides"]["variant"] == "rezero" and run["transform_bias"] is None
    assert results["settings"]["gated_skip_init"]["rezero"] == "alpha = 0"
    assert "| 3 | rezero | 71 | " in (tmp_path / "study" / "table.md").read_text()


def test_study_end_to_end_on_a_tiny_budget(tmp_path, capsys):
    out = tmp_path / "variants"
    results = variants_study(
        ["coupled", "plain"], [3], 2, dataset=separable_digits(n_train=128, n_test=50),
        epochs=1, out=out, isolate=False,
    )
    # coupled is 50 wide in both modes (trained once per seed), plain 50 and 71.
    runs = results["runs"]
    assert sorted((r["variant"], r["width"], r["seed"]) for r in runs) == [
        ("coupled", 50, 0), ("coupled", 50, 1), ("plain", 50, 0), ("plain", 50, 1),
        ("plain", 71, 0), ("plain", 71, 1)]
    for r in runs:
        assert r["overrides"]["variant"] == r["variant"] and r["overrides"]["stacked"]
        assert len(r["loss_curve"]) == 1 and 0 <= r["test_accuracy"] <= 1
        assert (out / f"{r['variant']}_w{r['width']}_depth3_seed{r['seed']}" /
                "metrics.json").exists()
    rows = {(r["mode"], r["variant"]): r for r in results["summary"]}
    assert len(rows) == 4
    assert rows[("matched", "plain")]["width"] == 71 and rows[("equal", "plain")]["width"] == 50
    for (_mode, variant), row in rows.items():
        mine = [r for r in runs if r["variant"] == variant and r["width"] == row["width"]]
        for key in ("test_accuracy", "final_train_loss"):
            values = [r[key] for r in mine]
            assert row[key]["mean"] == pytest.approx(np.mean(values))
            assert row[key]["std"] == pytest.approx(np.std(values))
    assert rows[("equal", "coupled")]["test_accuracy"] == rows[("matched", "coupled")][
        "test_accuracy"]

    written = json.loads((out / "results.json").read_text())
    assert written["settings"]["matched_widths"] == {"coupled": 50, "plain": 71}
    assert written["settings"]["recipe"]["epochs"] == 1
    table = (out / "table.md").read_text()
    assert "**equal width**" in table and "**matched parameters**" in table
    assert "| 3 | plain | 71 | " in table and table.count("±") == 8
    png = (out / "variants.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert "[6/6] plain" in capsys.readouterr().out

    # Run again, the study resumes: finished runs are kept, not retrained. One run is gone
    # (trained again, identically: same seed), one was stopped after its training but
    # before its result.json (its run directory's metrics are used, without timings).
    gone, unrecorded = runs[0], runs[3]
    shutil.rmtree(gone["run_dir"])
    (Path(unrecorded["run_dir"]) / "result.json").unlink()
    kept_weights = Path(runs[5]["run_dir"]) / "model.weights.h5"
    kept_mtime = kept_weights.stat().st_mtime_ns
    again = variants_study(
        ["coupled", "plain"], [3], 2, dataset=separable_digits(n_train=128, n_test=50),
        epochs=1, out=out, isolate=False,
    )
    printed = capsys.readouterr().out
    assert "Resuming the study in" in printed and printed.count("finished earlier, kept") == 4
    assert kept_weights.stat().st_mtime_ns == kept_mtime
    by_dir = {r["run_dir"]: r for r in again["runs"]}
    assert by_dir[gone["run_dir"]]["loss_curve"] == pytest.approx(gone["loss_curve"])
    assert by_dir[unrecorded["run_dir"]]["test_accuracy"] == unrecorded["test_accuracy"]
    assert by_dir[unrecorded["run_dir"]]["seconds_per_epoch"] is None
    for before, after in zip(results["summary"], again["summary"], strict=True):
        for key in ("test_accuracy", "final_train_loss"):
            assert after[key]["mean"] == pytest.approx(before[key]["mean"])

    # Other settings in the same directory are refused, before any work.
    with pytest.raises(FileExistsError, match=r"holds a study with other settings \(recipe"):
        variants_study(["coupled", "plain"], [3], 2,
                       dataset=separable_digits(n_train=128, n_test=50), epochs=2, out=out,
                       isolate=False)


@pytest.mark.parametrize("kwargs, message", [
    ({"variants": ["coupled", "highway"]}, "variants must be distinct names from coupled"),
    ({"modes": ["wide"]}, "widths must be distinct names from equal, matched"),
    ({"seeds": 0}, "seeds must be a positive count"),
    ({"max_train_examples": 0}, "max_train_examples must be a positive integer"),
    ({"learning_rate": 0.0}, "learning_rate must be a finite number > 0"),
])
def test_bad_options_are_refused_before_any_work(tmp_path, kwargs, message):
    out = tmp_path / "variants"
    kwargs = {"variants": ["coupled"], "modes": ["equal"], "seeds": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        variants_study(kwargs.pop("variants"), [2], kwargs.pop("seeds"), out=out, **kwargs)
    assert not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--variants", "coupled,highway"], "argument --variants: invalid choice: 'highway'"),
    # The language-model study: an FC option is refused, and the defaults pass that check
    # (a float default once made it fail) to reach the corpus's own check.
    (["--corpus", "x", "--transform-bias", "1"], "--transform-bias applies to the FC nets"),
    (["--corpus", "/nonexistent/corpus"], "/nonexistent/corpus"),
    (["--widths", "wide"], "argument --widths: invalid choice: 'wide'"),
    (["--seeds", "0"], "argument --seeds: expected a positive integer"),
    (["--max-train-examples", "0"], "argument --max-train-examples: expected a positive"),
    (["--checkpoint-every", "50"], "--checkpoint-every need --corpus"),
    (["--corpus", "x", "--checkpoint-every", "0"], "argument --checkpoint-every: expected a"),
])
def test_bad_flags_are_one_line_usage_errors(tmp_path, capsys, args, message):
    out = tmp_path / "variants"
    depths = [] if "--corpus" in args else ["--depths", "2"]
    try:  # argparse's usage errors exit; the command's own refusals return the status
        code = cli.main(["variants", *depths, "--out", str(out), *args])
    except SystemExit as refused:
        code = refused.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_two_writers_of_one_figure_both_succeed(tmp_path):
    # Two processes sharing a study write its figure at the same moment. Here the second
    # writes it completely while the first is between saving its temporary file and the
    # rename; each must use a temporary file of its own (a shared name made the first's
    # rename fail: its file was gone).
    from matplotlib.figure import Figure
    from PIL import Image

    from zoo.files import save_figure

    path = tmp_path / "variants.png"
    first, second = Figure(figsize=(2, 1)), Figure(figsize=(3, 1))
    real_savefig = first.savefig

    def savefig_then_the_other_process_writes(*args, **kwargs):
        real_savefig(*args, **kwargs)
        save_figure(second, path)

    first.savefig = savefig_then_the_other_process_writes
    save_figure(first, path)
    assert Image.open(path).size == (240, 120)  # the first's 2 x 1 inches at 120 dpi, last
    assert [p.name for p in tmp_path.iterdir()] == ["variants.png"]  # no temporary left


def test_a_study_at_another_learning_rate_trains_every_net_at_it(tmp_path):
    data = separable_digits(n_train=512, n_test=50)
    curves = {}
    for rate in (None, 1e-9):
        out = tmp_path / f"rate-{rate}"
        results = variants_study(["residual"], [3], 1, modes=["equal"], dataset=data,
                                 epochs=2, learning_rate=rate, out=out, isolate=False)
        (run,) = results["runs"]
        recorded = json.loads((Path(run["run_dir"]) / "run.json").read_text())["recipe"]
        assert recorded["learning_rate"] == results["settings"]["recipe"]["learning_rate"] \
            == (5e-3 if rate is None else rate)  # adam_fc's, or the one given
        curves[rate] = run["loss_curve"]
    # At 1e-9 the net does not move from its initial loss; at adam_fc's rate it learns.
    assert curves[1e-9][1] == pytest.approx(curves[1e-9][0], abs=1e-4)
    assert curves[None][1] < curves[None][0] - 0.1


def test_studies_of_other_variants_merge_into_one_table_and_figure(tmp_path, capsys):
    data = separable_digits(n_train=128, n_test=50)
    greff = variants_study(["coupled"], [3], 1, modes=["matched"], dataset=data, epochs=1,
                           out=tmp_path / "greff", isolate=False)
    skips = variants_study(["rezero"], [3], 1, modes=["matched"], dataset=data, epochs=1,
                           out=tmp_path / "skips", isolate=False)
    code = cli.main(["variants", "--merge", str(tmp_path / "greff"), str(tmp_path / "skips"),
                     "--out", str(tmp_path / "both")])
    assert code in (0, None)
    merged = json.loads((tmp_path / "both" / "results.json").read_text())
    assert merged["settings"]["variants"] == ["coupled", "rezero"]
    assert merged["settings"]["matched_widths"] == {"coupled": 50, "rezero": 71}
    assert merged["summary"] == greff["summary"] + skips["summary"]
    table = (tmp_path / "both" / "table.md").read_text()
    assert "| 3 | coupled | 50 | " in table and "| 3 | rezero | 71 | " in table
    assert (tmp_path / "both" / "variants.png").read_bytes()[:4] == b"\x89PNG"
    capsys.readouterr()

    # Another recipe, the same variant twice, or no results: one line each, nothing written.
    variants_study(["residual"], [3], 1, modes=["matched"], dataset=data, epochs=2,
                   out=tmp_path / "longer", isolate=False)
    for studies, message in (
            (["greff", "longer"], "differ in recipe.epochs"),
            (["greff", "greff"], "coupled is in both"),
            (["greff", "nowhere"], "holds no results.json")):
        code = cli.main(["variants", "--merge", *[str(tmp_path / s) for s in studies],
                         "--out", str(tmp_path / "refused")])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "refused").exists()
