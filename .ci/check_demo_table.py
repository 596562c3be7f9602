#!/usr/bin/env python3
"""Checks the table `make demo` printed against the README's demo table.

    .ci/check_demo_table.py README.md DEMO_OUTPUT

Both tables are the demo's Markdown table (`| depth | highway test acc | plain test acc |
highway train loss | plain train loss |`). They agree when they have the same depths and every
accuracy is within ACCURACY_TOLERANCE and every loss within LOSS_TOLERANCE (absolute): the
demo is seeded, but another CPU or library build may move the last digit. Exit status 0 when
they agree, 2 with one line saying what differs, 2 when either file has no such table.
Standard library only, so CI can run it with any Python 3.
"""

from __future__ import annotations

import sys
from pathlib import Path

ACCURACY_TOLERANCE = 0.01
LOSS_TOLERANCE = 0.05
HEADER = ["depth", "highway test acc", "plain test acc", "highway train loss",
          "plain train loss"]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def read_table(text: str) -> dict[int, dict[str, float]]:
    """The first demo table in `text`: {depth: {column: value}}; ValueError if there is none."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("|") and _cells(line) == HEADER:
            rows = {}
            for row in lines[i + 2:]:  # past the header and its alignment row
                if not row.lstrip().startswith("|"):
                    break
                cells = _cells(row)
                rows[int(cells[0])] = {c: float(v) for c, v in zip(HEADER[1:], cells[1:])}
            if rows:
                return rows
    raise ValueError("no demo table (| " + " | ".join(HEADER) + " |)")


def differences(expected: dict[int, dict[str, float]],
                measured: dict[int, dict[str, float]]) -> list[str]:
    """What differs beyond the tolerances, one phrase each (empty when the tables agree)."""
    if sorted(expected) != sorted(measured):
        return [f"depths {sorted(expected)} in the README, {sorted(measured)} printed"]
    out = []
    for depth in sorted(expected):
        for column in HEADER[1:]:
            tolerance = ACCURACY_TOLERANCE if "acc" in column else LOSS_TOLERANCE
            want, got = expected[depth][column], measured[depth][column]
            if abs(want - got) > tolerance + 1e-9:  # the tables' values have 3 decimals
                out.append(f"depth {depth} {column} {got:.3f} printed, {want:.3f} in the README "
                           f"(tolerance {tolerance})")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: check_demo_table.py README_PATH DEMO_OUTPUT_PATH", file=sys.stderr)
        return 2
    tables = []
    for path in argv:
        try:
            tables.append(read_table(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError) as error:
            print(f"check_demo_table: {path}: {error}", file=sys.stderr)
            return 2
    found = differences(*tables)
    if found:
        print(f"check_demo_table: {argv[0]}'s demo table is stale: " + "; ".join(found)
              + f". Copy the table {argv[1]} holds into {argv[0]} and docs/results/demo.md.",
              file=sys.stderr)
        return 2
    print(f"check_demo_table: the demo's table matches {argv[0]}'s (accuracy within "
          f"{ACCURACY_TOLERANCE}, loss within {LOSS_TOLERANCE})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
