#!/bin/bash
# Resumes Highway B's run of the recipe of today (issue 72) from this folder's state.
# Usage, from the main checkout (its .venv set up, CIFAR-10 prepared with prepare-images):
#   DATA=/work/data/cifar10 PRECISION=float32|mixed_bfloat16 studies/under_way/cosine_b/resume.sh
# PRECISION: the faster on the machine at hand (python -m benchmarks.conv_peer --models
# highway_b_cifar10 --precision ...): float32 on the Intel Xeon of 2026-12-06, mixed_bfloat16
# on the AMD EPYCs. The run records each epoch's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
main=$(cd "$here/../../.." && pwd)
commit=fee184b
worktree=${WORKTREE:-$main/../study_b}
out=${OUT:-$main/../runs/cosine_b/highway_b_cifar10}
[ -d "$worktree" ] || git -C "$main" worktree add "$worktree" "$commit"
test "$(git -C "$worktree" rev-parse --short=7 HEAD)" = "$commit"
if [ ! -e "$out/run.json" ]; then mkdir -p "$out" && cp -r "$here/highway_b_cifar10/." "$out/"; fi
cd "$worktree"
PYTHONPATH="$worktree" TF_CPP_MIN_LOG_LEVEL=2 TF_NUM_INTRAOP_THREADS=2 TF_NUM_INTEROP_THREADS=1 \
    exec "$main/.venv/bin/python" -m highway_zoo train highway_b_cifar10 --recipe cosine_cifar \
    --seed 0 --data-dir "${DATA:?set DATA to the prepared CIFAR-10}" --checkpoint-every 100 \
    --verbose 2 --dtype "${PRECISION:?set PRECISION to float32 or mixed_bfloat16}" --out "$out"
