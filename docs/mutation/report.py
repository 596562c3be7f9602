"""Tallies `mutmut results --all true` (docs/mutation/<target>-results.txt) by file: killed,
survived, timed out, no tests, not checked. Usage: python3 report.py RESULTS.txt TARGET."""

import collections
import re
import sys

STATUSES = ("killed", "survived", "timeout", "no tests", "not checked", "suspicious",
            "segfault", "skipped", "caught by type check")


def main(results: str, target: str) -> None:
    by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in open(results, encoding="utf-8"):
        match = re.match(r"\s*([\w.]+)\.x.*__mutmut_\d+: (.+)$", line.rstrip())
        if match:
            module, status = match.groups()
            by_file[module.replace(".", "/") + ".py"][status.strip()] += 1
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


def _row(name, counts, columns):
    tested = counts["killed"] + counts["survived"] + counts["timeout"]
    score = f"{100 * (counts['killed'] + counts['timeout']) / tested:.1f}%" if tested else "-"
    return (f"| {name} | {sum(counts.values())} | "
            + " | ".join(str(counts[s]) for s in columns) + f" | {score} |")


if __name__ == "__main__":
    main(*sys.argv[1:])
