#!/bin/bash
# One device call: LSTM-Char-Large's VARIANTS (default Coupled, the shipped weights, and Full),
# 25 epochs each, side by side, each with Greff et al.'s layer count for its variant (Residual
# twice the model's, Plain one: `training.experiments.lm_variants.highway_layers`), stopped at
# DEADLINE s (all but SHIP at FULL_DEADLINE, so that SHIP has the GPU to itself at the end);
# SHIP's weights (default coupled; none if empty) come back as float16 in parts.
# Run from the repository's root: benchmarks/research/gpu_large.sh (the records it made are in
# docs/results/language_model/ptb_large_gpu_25epochs/); e.g. VARIANTS="residual plain" SHIP=
# for the paper's Residual and Plain. MODEL, EXTRA (more train flags), PY, LOCAL (no .whl
# install), OUT and R (where the runs go) change it; tests/test_research_scripts.py runs it on
# a tiny corpus with a narrow Small.
# The checkout travels whole, carried paths included, and must stay under the lease's 64 MiB:
# move what the call does not read out of it for the call and back after (studies/under_way
# and zoo/char_lm/weights, about 94 MB together; with a study's parts also docs/results
# and zoo/fc_nets/weights: the code alone is about 6 MiB).
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}; FULL_DEADLINE=${FULL_DEADLINE:-490}; END=${END:-590}; MODEL=${MODEL:-lstm_char_large_ptb}; EXTRA=${EXTRA:-}
VARIANTS=${VARIANTS:-coupled full}; SHIP=${SHIP-coupled}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=${R:-/tmp/runs}; mkdir -p $R/w16
. "$(dirname "$0")/device_env.sh"
cp .device/commit.txt $R/ 2>/dev/null
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc) > $R/machine.txt 2>&1
n=$(echo $VARIANTS | wc -w); fraction=$(( 80 / n )); [ $fraction -gt 40 ] && fraction=40
for v in $VARIANTS; do
  stop=$DEADLINE; [ "$v" != "$SHIP" ] && stop=$FULL_DEADLINE
  layers=$($PY -c "from training.experiments.lm_variants import highway_layers as h; print(h('$MODEL', '$v'))") || exit 1
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.$(printf %02d $fraction) timeout -s INT $(( stop - ($(date +%s) - T0) )) \
    $PY -m highway_zoo train "$MODEL" --corpus .device/ptb_prepared --variant $v --seed 0 \
    --highway-layers $layers --no-gate-summaries --verbose 2 $EXTRA --out $R/$v > $R/$v.log 2>&1 &
  eval "pid_$v=\$!"
done
(while sleep ${PROGRESS_EVERY:-30}; do echo "$(( $(date +%s) - T0 )) s $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"; for v in $VARIANTS; do grep -h "val_perplexity" $R/$v.log | tail -1 | cut -c1-200; done; done) > $R/progress.log 2>&1 &
progress=$!
for v in $VARIANTS; do [ "$v" = "$SHIP" ] && { eval "wait \$pid_$v"; echo "$v rc $? at $(( $(date +%s) - T0 )) s"; }; done
if [ -n "$SHIP" ] && [ -f $R/$SHIP/metrics.json ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 timeout $(( END - ($(date +%s) - T0) )) \
    $PY -m benchmarks.research.float16_check $R/$SHIP .device/ptb_prepared $R/w16 > $R/f16_check.log 2>&1
  echo "f16 rc $? at $(( $(date +%s) - T0 )) s"
  (cd $R/w16 && split -b 15M -d *.weights.h5 "$OUT/large_f16.part" && sha256sum *.weights.h5 > $R/w16.sha256)
fi
for v in $VARIANTS; do [ "$v" != "$SHIP" ] && { eval "wait \$pid_$v"; echo "$v rc $? at $(( $(date +%s) - T0 )) s"; }; done
kill $progress 2>/dev/null
cd $R && tar czf "$OUT/large_runs.tgz" --exclude='*.h5' --exclude=checkpoint --exclude=tensorboard \
  commit.txt machine.txt *.log w16.sha256 w16/float16_check.json $VARIANTS 2>/dev/null
ls -la $OUT; for v in $VARIANTS; do echo "== $v"; grep -c "val_perplexity" $v.log; grep "Test perplexity" $v.log; done
cat $R/f16_check.log | tail -3
