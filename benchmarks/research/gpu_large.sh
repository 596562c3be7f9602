#!/bin/bash
# One device call: LSTM-Char-Large Coupled (the shipped weights) and Full, 25 epochs each,
# side by side, stopped at DEADLINE s; the Coupled weights come back as float16 in parts.
# Run from the repository's root: benchmarks/research/gpu_large.sh (the records it made are in
# docs/results/language_model/ptb_large_gpu_25epochs/). MODEL, EXTRA (more train flags), PY,
# LOCAL (no .whl install), OUT and R (where the runs go) change it; tests/
# test_research_scripts.py runs it on a tiny corpus with a narrow Small.
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}; FULL_DEADLINE=${FULL_DEADLINE:-490}; END=${END:-590}; MODEL=${MODEL:-lstm_char_large_ptb}; EXTRA=${EXTRA:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=${R:-/tmp/runs}; mkdir -p $R/w16
if [ -d .whl ] && [ -z "${LOCAL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
PY=${PY:-python3}
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
cp .device/commit.txt $R/ 2>/dev/null
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc) > $R/machine.txt 2>&1
for v in coupled full; do  # Full stops first, so that Coupled has the GPU to itself at the end
  stop=$DEADLINE; [ $v = full ] && stop=$FULL_DEADLINE
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.4 timeout -s INT $(( stop - ($(date +%s) - T0) )) \
    $PY -m highway_zoo train "$MODEL" --corpus .device/ptb_prepared --variant $v --seed 0 \
    --no-gate-summaries --verbose 2 $EXTRA --out $R/$v > $R/$v.log 2>&1 &
  eval "pid_$v=\$!"
done
(while sleep ${PROGRESS_EVERY:-30}; do echo "$(( $(date +%s) - T0 )) s $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader)"; grep -h "val_perplexity" $R/coupled.log | tail -1 | cut -c1-200; done) > $R/progress.log 2>&1 &
progress=$!
wait $pid_coupled; echo "coupled rc $? at $(( $(date +%s) - T0 )) s"
if [ -f $R/coupled/metrics.json ]; then
  XLA_PYTHON_CLIENT_MEM_FRACTION=0.3 timeout $(( END - ($(date +%s) - T0) )) \
    $PY -m benchmarks.research.float16_check $R/coupled .device/ptb_prepared $R/w16 > $R/f16_check.log 2>&1
  echo "f16 rc $? at $(( $(date +%s) - T0 )) s"
  (cd $R/w16 && split -b 15M -d *.weights.h5 "$OUT/large_f16.part" && sha256sum *.weights.h5 > $R/w16.sha256)
fi
wait $pid_full; echo "full rc $? at $(( $(date +%s) - T0 )) s"
kill $progress 2>/dev/null
cd $R && tar czf "$OUT/large_runs.tgz" --exclude='*.h5' --exclude=checkpoint --exclude=tensorboard \
  commit.txt machine.txt *.log w16.sha256 w16/float16_check.json coupled full 2>/dev/null
ls -la $OUT; for v in coupled full; do echo "== $v"; grep -c "val_perplexity" $v.log; grep "Test perplexity" $v.log; done
cat $R/f16_check.log | tail -3
