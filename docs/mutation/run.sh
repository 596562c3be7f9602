#!/bin/sh
# Mutation testing of the numerical core (docs/mutation/README.md): mutmut 3 on a copy of the
# committed tree (git archive HEAD), so the working tree is never mutated; one target at a
# time, each with only its own fast tests, one mutant at a time.
# Usage: docs/mutation/run.sh [analysis] [layers]   (default: both)
# Environment: MUTMUT (default .venv/bin/mutmut), MUTATION_DIR (the scratch copies, default
# $TMPDIR/highway-zoo-mutation), MUTATION_BUDGET (seconds per target, default none: a run
# stopped at its budget keeps the results of the mutants it tried).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${MUTATION_DIR:-${TMPDIR:-/tmp}/highway-zoo-mutation}
mutmut=${MUTMUT:-$root/.venv/bin/mutmut}
budget=${MUTATION_BUDGET:-0}
targets=${*:-analysis layers}
for target in $targets; do
    copy="$work/$target"
    rm -rf "$copy" && mkdir -p "$copy"
    git -C "$root" archive HEAD | tar -x -C "$copy"
    cp "$here/$target.cfg" "$copy/setup.cfg"
    cp "$here/preload.txt" "$copy/preload.txt"
    rm -f "$copy/pyproject.toml"  # mutmut reads [tool.mutmut] there before setup.cfg
    started=$(date +%s)
    (cd "$copy" && TF_CPP_MIN_LOG_LEVEL=2 timeout "$budget" "$mutmut" run --max-children 1 \
        > "$copy/mutmut.log" 2>&1) || echo "$target: mutmut stopped (budget ${budget}s or error; see $copy/mutmut.log)"
    echo "$target: $(( $(date +%s) - started )) s" > "$here/$target-duration.txt"
    (cd "$copy" && "$mutmut" results --all true > "$here/$target-results.txt" 2>&1) || true
    python3 "$here/report.py" "$here/$target-results.txt" "$target" > "$here/$target.md"
    echo "report: $here/$target.md"
done
