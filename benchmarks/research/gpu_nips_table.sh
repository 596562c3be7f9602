#!/bin/bash
# One device call of NIPS 2015 Tables 2-3 on a lent GPU (JAX, no TensorFlow): the conv-net speed
# against plain PyTorch with cuDNN (`bench --gpu --only conv_peer`'s), then the study trains until
# DEADLINE s and its directory comes back as 15 MB parts, which the next call carries to resume.
#
# Carry `.whl`, the wheels the device lacks, for its Python (there: `python3 -V`), e.g.
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
#     keras==$(python -c "import keras; print(keras.__version__)") namex optree google-crc32c
# and `.device`:
#   .device/cifar10-jpeg.tar.gz       the data archive (../shared/data), prepared there
#   .device/commit.txt                the commit the call runs (`git rev-parse HEAD`)
#   .device/study.tgz.NN              the last call's parts ($OUT/study.tgz.NN), to resume
# then join what comes back here with `cat study.tgz.* | tar xz`.
# The checkout travels whole, carried paths included, and must stay under the lease's 64 MiB:
# move what the call does not read out of it for the call and back after (studies/under_way
# and zoo/char_lm/weights, about 94 MB together; with a study's parts also docs/results
# and zoo/fc_nets/weights: the code alone is about 6 MiB).
# Run from the repository's root: benchmarks/research/gpu_nips_table.sh. TABLE, MODELS, DATASET,
# ARCHIVE, EXTRA (more nips-table flags), BENCH (0: no speed check), BENCH_ARGS, PY, LOCAL (no
# .whl install), DEADLINE, OUT and R change it; tests/test_research_scripts.py runs it on a tiny
# image folder with a one-epoch recipe.
set -u
T0=$(date +%s)
TABLE=${TABLE:-2}; MODELS=${MODELS:-highway_b_cifar10}; DATASET=${DATASET:-cifar10}
ARCHIVE=${ARCHIVE:-.device/cifar10-jpeg.tar.gz}; EXTRA=${EXTRA:-}; BENCH=${BENCH:-1}
BENCH_ARGS=${BENCH_ARGS:---backend jax --repeats 3}
DEADLINE=${DEADLINE:-540}; OUT=${OUT:-/tmp/out}; R=${R:-/tmp/runs}; mkdir -p "$OUT" "$R"
. "$(dirname "$0")/device_env.sh"
elapsed() { echo $(( $(date +%s) - T0 )); }
study=$R/nips_table${TABLE}_gpu
# The data at the same path in every call: the study's data record names it. A machine still
# warm from the last call keeps its data and its study, newer than the parts carried.
[ -d "$R/data/$DATASET" ] || $PY -m highway_zoo prepare-images "$DATASET" --from "$ARCHIVE" \
  --out "$R/data/$DATASET" > "$R/prepare.log" 2>&1 || { cat "$R/prepare.log"; exit 1; }
if [ ! -d "$study" ] && compgen -G ".device/study.tgz.*" > /dev/null; then
  cat .device/study.tgz.* | tar xz -C "$R" && echo "resumed $(ls "$study" | tr '\n' ' ')"
fi
# The commit of every call (the device has no git to check that the code stayed the same).
echo "$(date -u +%FT%TZ) $(cat .device/commit.txt 2>/dev/null)" >> "$study.commit.txt"
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc) > "$R/machine.txt" 2>&1
if [ "$BENCH" = 1 ]; then
  # what `highway-zoo bench --gpu --only conv_peer` runs, its JSON straight to $OUT
  timeout $(( DEADLINE / 3 )) $PY -m benchmarks.conv_peer $BENCH_ARGS \
    --out "$OUT/gpu_conv_peer.json" > "$R/bench.log" 2>&1
  echo "bench rc $? at $(elapsed) s"
fi
(while sleep ${PROGRESS_EVERY:-30}; do
   echo "$(elapsed) s $(nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null)"
 done) > "$R/progress.log" 2>&1 &
progress=$!
# SIGINT at the deadline: the run keeps its last checkpoint, the next call resumes from it.
timeout -s INT $(( DEADLINE - $(elapsed) )) $PY -m highway_zoo nips-table "$TABLE" \
  --models $MODELS --data-dir "$R/data/$DATASET" --out "$study" $EXTRA > "$R/study.log" 2>&1
echo "study rc $? at $(elapsed) s"
kill $progress 2>/dev/null
rm -rf "$study/.claims"; find "$study" -name .lock -delete
lease=$study/lease-$(date -u -d @$T0 +%Y%m%dT%H%M%S)  # each call's logs kept
mkdir -p "$lease" && mv "$R"/*.log "$R/machine.txt" "$lease/" 2>/dev/null
(cd "$R" && tar cz "$(basename "$study")" "$(basename "$study").commit.txt" 2>/dev/null \
   | split -b 15M -d - "$OUT/study.tgz.")
ls -la "$OUT"; tail -5 "$lease/study.log"; tail -8 "$lease/bench.log" 2>/dev/null
