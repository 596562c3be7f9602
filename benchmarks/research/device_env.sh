# Sourced by the GPU lease's scripts (gpu_*.sh), run from the repository's root there: installs
# the carried wheels (.whl) the device lacks unless LOCAL is set, and sets PY and the backend.
if [ -d .whl ] && [ -z "${LOCAL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
PY=${PY:-python3}
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
