#!/bin/sh
# Mutation testing of the numerical core (docs/mutation/README.md): mutmut 3 on a copy of the
# committed tree (git archive HEAD), so the working tree is never mutated; one target at a
# time, each with only its own fast tests, one mutant at a time.
# Usage: docs/mutation/run.sh [analysis] [layers]   (default: both)
# Environment: MUTMUT (default .venv/bin/mutmut), MUTATION_DIR (the scratch copies, default
# $TMPDIR/highway-zoo-mutation), MUTATION_BUDGET (seconds per target, default none: a run
# stopped at its budget keeps the results of the mutants it tried), MUTATION_SAMPLE (N: only
# N mutants drawn at random, seed 0, from all of the target's, so that the share killed is an
# unbiased estimate when all of them would take hours; default: every mutant, in order).
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
    cp "$here/preload.txt" "$here/keep_signatures.py" "$copy/"
    rm -f "$copy/pyproject.toml"  # mutmut reads [tool.mutmut] there before setup.cfg
    started=$(date +%s)
    names=""
    if [ -n "${MUTATION_SAMPLE:-}" ]; then
        # Generate the mutants and trace the tests (a name that matches none runs no mutant),
        # then draw the sample from their names.
        (cd "$copy" && TF_CPP_MIN_LOG_LEVEL=2 "$mutmut" run "no-such-mutant" > "$copy/generate.log" 2>&1) || true
        names=$(cd "$copy" && "$mutmut" results --all true 2>/dev/null | python3 -c "
import random, sys
names = sorted(line.split(':')[0].strip() for line in sys.stdin if '__mutmut_' in line)
print(' '.join(random.Random(0).sample(names, min($MUTATION_SAMPLE, len(names)))))")
    fi
    # shellcheck disable=SC2086 (the names are words)
    (cd "$copy" && TF_CPP_MIN_LOG_LEVEL=2 timeout "$budget" "$mutmut" run --max-children 1 $names \
        > "$copy/mutmut.log" 2>&1) || echo "$target: mutmut stopped (budget ${budget}s or error; see $copy/mutmut.log)"
    echo "$target: $(( $(date +%s) - started )) s" > "$here/$target-duration.txt"
    (cd "$copy" && "$mutmut" results --all true > "$here/$target-results.txt" 2>&1) || true
    python3 "$here/report.py" "$here/$target-results.txt" "$target" ${MUTATION_SAMPLE:+sampled} > "$here/$target.md"
    echo "report: $here/$target.md"
done
