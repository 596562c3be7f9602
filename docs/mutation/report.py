"""Tallies `mutmut results --all true` (docs/mutation/<target>-results.txt) by file: killed,
survived, timed out, no tests, not checked. Usage: python3 report.py RESULTS.txt TARGET
[sampled]: "sampled" when the mutants tried were drawn at random (MUTATION_SAMPLE), which adds
the share killed with its interval."""

import collections
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STATUSES = ("killed", "survived", "timeout", "no tests", "not checked", "suspicious",
            "segfault", "skipped", "caught by type check")


def main(results: str, target: str, sampled: str = "") -> None:
    by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in open(results, encoding="utf-8"):
        match = re.match(r"\s*([\w.]+)\.x.*__mutmut_\d+: (.+)$", line.rstrip())
        if match:
            module, status = match.groups()
            by_file[_file_of(module)][status.strip()] += 1
    columns = [s for s in STATUSES if any(c[s] for c in by_file.values())]
    print(f"# Mutation testing: {target}\n")
    print("| file | mutants | " + " | ".join(columns) + " | killed of tested |")
    print("| --- | ---: | " + " | ".join("---:" for _ in columns) + " | ---: |")
    total: collections.Counter = collections.Counter()
    for name in sorted(by_file):
        counts = by_file[name]
        total.update(counts)
        print(_row(name, counts, columns))
    print(_row("**all**", total, columns))
    tested = total["killed"] + total["survived"] + total["timeout"]
    if tested and sampled:
        low, high = wilson(total["killed"] + total["timeout"], tested)
        print(f"\n{tested:,} of {sum(total.values()):,} mutants tried, drawn at random (and "
              f"{total['no tests']:,} that no test of the target reaches): the share of the "
              f"reached mutants the tests kill is {100 * low:.1f}% to {100 * high:.1f}% "
              "(95% Wilson interval).")


def _file_of(module: str) -> str:
    path = module.replace(".", "/")
    return f"{path}/__init__.py" if (ROOT / path).is_dir() else f"{path}.py"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion k/n (95% for z = 1.96)."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
    return centre - half, centre + half


def _row(name, counts, columns):
    tested = counts["killed"] + counts["survived"] + counts["timeout"]
    score = f"{100 * (counts['killed'] + counts['timeout']) / tested:.1f}%" if tested else "-"
    return (f"| {name} | {sum(counts.values())} | "
            + " | ".join(str(counts[s]) for s in columns) + f" | {score} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
