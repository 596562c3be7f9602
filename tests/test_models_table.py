"""The models table (`benchmarks.models_table`, issue 30): the committed CSV has one row
per registered model and the documented columns; its counts agree with the built models and
with counts by hand; the docs' models index is made from it; the script writes a well-formed
table for one tiny model in a fresh process and refuses an unknown name in one line."""

from __future__ import annotations

import json
import re
import shutil
import statistics
from pathlib import Path

import pytest

import zoo
from benchmarks import driver, models_table

ROOT = Path(__file__).resolve().parent.parent
CSV = models_table.RESULTS.with_name(models_table.CSV_NAME)


@pytest.fixture(scope="module")
def rows():
    return {row["model"]: row for row in models_table.read_csv(CSV)}


def _flops(row) -> int:
    return round(float(row["gflops_per_sample"]) * 1e9)


def test_the_committed_csv_has_one_row_per_registered_model_and_the_documented_columns():
    with open(CSV, encoding="utf-8") as f:
        header = f.readline().strip().split(",")
    assert header == list(models_table.COLUMNS)
    table = models_table.read_csv(CSV)
    assert [row["model"] for row in table] == zoo.list_models()
    assert all(all(row[c] != "" for c in ("param_count", "gflops_per_sample", "batch_size",
                                           "train_samples_per_sec", "infer_samples_per_sec"))
               for row in table)
    run = json.loads(models_table.RESULTS.read_text(encoding="utf-8"))
    assert run["columns"] == models_table.COLUMNS and run["csv"] == CSV.name
    assert set(run["runs"]) == {row["model"] for row in table}
    # the load of the (shared) machine is recorded, before, after and at every measurement
    assert len(run["load_average"]["before"]) == 3 and run["load_average"]["cores"] >= 1
    assert all(len(r["load_average"]) == 3 for runs in run["runs"].values() for r in runs)


def test_the_csv_says_which_models_ship_weights_and_the_papers_numbers(rows):
    shipped = set(zoo.list_models(pretrained=True))
    assert {n for n, row in rows.items() if row["weights"] == "shipped"} == shipped
    # top1 is an accuracy: a shipped language model has a perplexity instead, and none.
    scored = {n for n in shipped if "test_accuracy" in zoo.describe(n)["pretrained"]}
    assert shipped - scored == {"lstm_char_small_ptb", "lstm_char_large_ptb"}
    assert all((row["top1"] != "") == (n in scored) for n, row in rows.items())
    # Numbers read from the papers: Table 1 (NIPS 2015), Greff et al.'s Table 1b, Kim's Table 3.
    assert (rows["highway_conv32_mnist"]["paper_metric"],
            float(rows["highway_conv32_mnist"]["paper_value"])) == ("accuracy", 99.55)
    assert (rows["highway50_imagenet"]["paper_metric"],
            float(rows["highway50_imagenet"]["paper_value"])) == ("top5_error", 7.53)
    assert "Table 1b" in rows["highway50_imagenet"]["paper_source"]
    assert (rows["lstm_char_small_ptb"]["paper_metric"],
            float(rows["lstm_char_small_ptb"]["paper_value"])) == ("perplexity", 92.3)
    # Fig. 1 plots training loss: the FC nets have no paper number, and nothing else is filled
    fc = rows["highway_fc10_mnist"]
    assert fc["paper_metric"] == fc["paper_value"] == fc["paper_source"] == ""
    # the FC nets' weights and the conv nets' (NIPS 2015 Table 1's runs) were tested on the
    # full MNIST's 10,000 digits, and the rows say so
    for name in ("highway_fc10_mnist", "highway_conv16_mnist", "highway_conv32_mnist"):
        evaluated = rows[name]["top1_eval"]
        assert "10,000 examples" in evaluated and "sample" not in evaluated
    assert 80 < float(fc["top1"]) <= 100  # a percentage, not a fraction


@pytest.mark.parametrize("name", ["highway_fc10_mnist", "plain_fc10_mnist",
                                  "highway_conv16_mnist", "highway_a_cifar10"])
def test_param_count_is_the_built_models(rows, name):
    assert int(rows[name]["param_count"]) == zoo.load(name).count_params()


def test_flops_are_the_count_by_hand(rows):
    # 784 -> 50 plain, 9 highway layers of a fused 50 x 100 [H | T] kernel, 50 -> 10
    assert _flops(rows["highway_fc10_mnist"]) == 2 * (784 * 50 + 9 * 50 * 100 + 50 * 10)
    # 784 -> 71, 9 plain 71 x 71 layers, 71 -> 10
    assert _flops(rows["plain_fc10_mnist"]) == 2 * (784 * 71 + 9 * 71 * 71 + 71 * 10)
    # conv 5x5 1->16 on 24x24, 3x3 16->[16|16] highway convs: 2 on 24x24, 3 on 12x12, 3 on 6x6
    highway = 3 * 3 * 16 * 32
    assert _flops(rows["highway_conv16_mnist"]) == 2 * (
        5 * 5 * 16 * 24 * 24 + highway * (2 * 24 * 24 + 3 * 12 * 12 + 3 * 6 * 6) + 144 * 10)
    # a 35-word sequence of Kim's Small net, per word: convolutions of width k (25k filters
    # over a 15-dim embedding) at 21 - k + 1 windows, one highway layer (525 -> [H | T]), two
    # LSTMs of 300 (input and recurrent kernels) and the 10,000-word softmax
    convs = sum(k * 15 * 25 * k * (21 - k + 1) for k in range(1, 7))
    word = convs + 525 * 1050 + 4 * 300 * (525 + 300) + 4 * 300 * (300 + 300) + 300 * 10000
    assert _flops(rows["lstm_char_small_ptb"]) == 2 * 35 * word


def test_a_language_models_convolutions_count_every_window():
    model = zoo.load("lstm_char_small_ptb", input_shape=(5, 8), lstm_units=4, classes=7)
    convs = sum(k * 15 * 25 * k * (8 - k + 1) for k in range(1, 7))
    word = convs + 525 * 1050 + 4 * 4 * (525 + 4) + 4 * 4 * (4 + 4) + 4 * 7
    assert models_table.forward_flops(model) == 2 * 5 * word


def _table_cells(page: str) -> dict[str, list[str]]:
    out = {}
    for line in page.splitlines():
        found = re.match(r"\| \[`([^`]+)`\]\(\1\.md\) \| (.*) \|$", line)
        if found:
            out[found.group(1)] = [c.strip() for c in found.group(2).split(" | ")]
    return out


def test_the_docs_models_table_is_the_csv(rows):
    """The site hook builds the models index from the committed CSV: every number of its
    table is the CSV's (parameters, FLOPs, the paper's number, the shipped accuracy, speeds)."""
    from mkdocs.config import load_config
    from mkdocs.structure.files import Files

    config = load_config(str(ROOT / "mkdocs.yml"))  # its hooks: docs/_hooks/generate.py
    files = config.plugins.on_files(Files([]), config=config)
    page = files.get_file_from_path("models/index.md").content_string
    assert files.get_file_from_path("results/data/bench/models.csv") is not None
    cells = _table_cells(page)
    assert list(cells) == list(rows)
    for name, (dataset, params, paper, shipped, gflops, batch, train, infer, *_) in (
            cells.items()):
        row = rows[name]
        assert dataset == row["dataset"] and int(params.replace(",", "")) == int(
            row["param_count"]) and batch == row["batch_size"]
        assert float(gflops) == pytest.approx(float(row["gflops_per_sample"]), rel=5e-3)
        assert float(train.replace(",", "")) == pytest.approx(
            float(row["train_samples_per_sec"]), abs=0.0501)  # shown to 0.1
        assert float(infer.replace(",", "")) == pytest.approx(
            float(row["infer_samples_per_sec"]), abs=0.0501)  # shown to 0.1
        if row["paper_metric"]:
            metric, value = paper.rsplit(" ", 1)
            assert (metric, float(value)) == (row["paper_metric"].replace("_", " "),
                                              float(row["paper_value"]))
        else:
            assert paper == "-"
        accuracy = re.sub(r" \([^()]*\)$", "", shipped)  # its caveats, checked below
        if row["weights"] == "shipped" and row["top1"] == "":  # a language model: perplexity
            perplexity = zoo.describe(name)["pretrained"]["test_perplexity"]
            assert accuracy == f"perplexity {perplexity:.2f}"
            continue
        assert (accuracy == "-") == (row["top1"] == "")
        if row["top1"]:
            assert float(accuracy) == float(row["top1"])
            assert shipped.endswith("(sample)") == ("sample" in row["top1_eval"])
            assert ("(JPEG copy" in shipped) == ("lossy" in row["top1_eval"])
            # a recipe that is not the paper's (a shortened schedule), said in both
            recipe = zoo.describe(name)["pretrained"]["recipe"]
            assert (f"recipe {recipe['name']})" in shipped) == ("paper_recipe" in recipe) == (
                f"trained with {recipe['name']}" in row["top1_eval"])
    assert "Load average (1 minute)" in page and "at the start of a model" in page


def test_the_script_writes_a_well_formed_table_for_one_model(tmp_path):
    out = tmp_path / "models_table.json"
    assert models_table.main(["--models", "highway_fc10_mnist", "--steps", "2",
                              "--max-seconds", "1", "--out", str(out)]) == 0
    table = models_table.read_csv(tmp_path / "models.csv")
    assert len(table) == 1 and list(table[0]) == list(models_table.COLUMNS)
    row = table[0]
    assert (row["model"], row["sample"], row["input_shape"]) == (
        "highway_fc10_mnist", "image", "28x28x1")
    assert int(row["param_count"]) == 85660 and _flops(row) == 169400
    assert float(row["train_samples_per_sec"]) > 0 and float(row["infer_samples_per_sec"]) > 0
    run = json.loads(out.read_text())
    assert run["settings"]["steps"] == 2 and len(run["runs"]["highway_fc10_mnist"]) == 1
    # The CSV's rate is the batch over the median of the timed steps (2, or 1 past 1 s).
    (measured,) = run["runs"]["highway_fc10_mnist"]
    steps = measured["train_step_s"]
    assert len(steps) in (1, 2) and all(t > 0 for t in steps)
    assert float(row["train_samples_per_sec"]) == pytest.approx(
        int(row["batch_size"]) / statistics.median(steps), rel=1e-2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.csv", "models_table.json"]


def test_an_unknown_model_is_refused_in_one_line_listing_what_exists(capsys):
    with pytest.raises(SystemExit) as exit_:
        models_table.main(["--models", "highway_fc11_mnist,highway_fc*", "--steps", "1"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "no registered model 'highway_fc11_mnist'" in error
    assert all(name in error for name in zoo.list_models())
    with pytest.raises(ValueError, match=r"^no registered model 'x\*y'; registered: "):
        models_table.select(["x*y"])
    assert models_table.select(["highway_fc1*0_mnist"]) == ["highway_fc10_mnist",
                                                           "highway_fc100_mnist"]


def test_the_script_follows_the_drivers_conventions(monkeypatch):
    p = models_table.parser()
    assert p.prog == "python -m benchmarks.models_table"
    assert p.parse_args([]).out == models_table.RESULTS  # what the suite passes as --out
    assert models_table.RESULTS.parent.name == "results"
    seen = {}
    monkeypatch.setattr(driver, "main", lambda p, argv, measure, run: seen.update(
        measure=measure, run=run) or 7)
    assert models_table.main([]) == 7
    assert seen == {"measure": models_table.measure, "run": models_table.run}
    # the batch sizes: the small default, ImageNet's, and Kim's recipe for the language model
    sizes = {name: models_table.batch_size(zoo.describe(name), 128, 32)
             for name in ("highway_b_cifar10", "resnet50_imagenet", "lstm_char_large_ptb")}
    assert sizes == {"highway_b_cifar10": 128, "resnet50_imagenet": 32, "lstm_char_large_ptb": 20}


def test_the_benchmarks_page_documents_every_column():
    page = (ROOT / "docs/results/benchmarks.md").read_text(encoding="utf-8")
    section = page[page.index("## The models table"):]
    assert [c for c in models_table.COLUMNS if f"`{c}`" not in section] == []


def _earlier(tmp_path, **settings):
    """The committed JSON as an earlier run of this machine, with `settings` changed."""
    run = json.loads(models_table.RESULTS.read_text(encoding="utf-8"))
    run["machine"] = driver.machine()
    run["settings"].update(settings)
    out = tmp_path / "models_table.json"
    out.write_text(json.dumps(run))
    return out, run


def test_keep_measures_only_the_named_models_and_keeps_the_others_rows(tmp_path, rows):
    """`--keep`: one model measured, every other registered model's run kept from the JSON
    already there, the CSV whole and in the registry's order, each run dated."""
    out, earlier = _earlier(tmp_path, steps=1, max_seconds=1.0)
    assert models_table.main(["--models", "highway_fc10_mnist", "--keep", "--steps", "1",
                              "--max-seconds", "1", "--out", str(out)]) == 0
    table = models_table.read_csv(tmp_path / "models.csv")
    assert [row["model"] for row in table] == zoo.list_models()
    run = json.loads(out.read_text())
    assert run["measured"] == ["highway_fc10_mnist"]
    assert run["kept"] == [n for n in zoo.list_models() if n != "highway_fc10_mnist"]
    (measured,) = run["runs"]["highway_fc10_mnist"]
    assert measured["date"] == run["date"] and measured["train_step_s"] != earlier["runs"][
        "highway_fc10_mnist"][0]["train_step_s"]
    for row in table:
        if row["model"] == "highway_fc10_mnist":
            continue
        assert row == rows[row["model"]]  # rebuilt from the registry and the kept run
        kept = run["runs"][row["model"]][0]
        assert kept["date"] == earlier["runs"][row["model"]][0].get("date", earlier["date"])


def test_keep_refuses_in_one_line_what_would_make_a_mixed_table(tmp_path, capsys):
    def refused(argv, message):
        assert models_table.main(argv) == 2
        assert re.search(message, capsys.readouterr().err.strip().splitlines()[-1])

    refused(["--keep", "--out", str(tmp_path / "none.json")], r"^--keep .* pass --models$")
    refused(["--models", "highway_fc10_mnist", "--keep", "--out", str(tmp_path / "none.json")],
            r"which does not exist")
    out, _ = _earlier(tmp_path, steps=3)
    refused(["--models", "highway_fc10_mnist", "--keep", "--out", str(out)],
            r"other settings \(steps 3 there, 10 now\)")
    out, earlier = _earlier(tmp_path)
    del earlier["runs"]["plain_fc10_mnist"]
    out.write_text(json.dumps(earlier))
    refused(["--models", "highway_fc10_mnist", "--keep", "--out", str(out)],
            r"has no run of plain_fc10_mnist; add them to --models$")
    earlier["machine"] = "elsewhere"
    out.write_text(json.dumps(earlier))
    refused(["--models", "highway_fc10_mnist,plain_fc10_mnist", "--keep", "--out", str(out)],
            r"was measured on 'elsewhere'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models_table.json"]  # nothing new


def test_facts_only_rewrites_the_csv_from_the_recorded_runs(tmp_path, capsys):
    """The committed CSV is what --facts-only makes of the committed runs and today's registry
    (so shipped weights reach the table without re-measuring); a JSON lacking a model is one
    line."""
    out = tmp_path / "models_table.json"
    shutil.copyfile(models_table.RESULTS, out)
    assert models_table.main(["--facts-only", "--out", str(out)]) == 0
    assert (tmp_path / "models.csv").read_text() == CSV.read_text()
    record = json.loads(out.read_text())
    del record["runs"]["highway_fc10_mnist"]
    out.write_text(json.dumps(record))
    capsys.readouterr()
    assert models_table.main(["--facts-only", "--out", str(out)]) == 2
    assert "has no run of highway_fc10_mnist" in capsys.readouterr().err
