# `make demo` sets everything up and runs the main job; `make test` runs the tests, those of
# the JAX and PyTorch backends among them (marked `backends`: subprocesses with KERAS_BACKEND
# set); `make test-backends` runs only those.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export KERAS_BACKEND ?= tensorflow

.PHONY: setup browser demo test test-slow test-backends lint wheel-check docs mutation clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	@# Full Fashion-MNIST, the real data that installs offline here (Debian package).
	@test -d /usr/share/datasets/fashion-mnist || apt-get install -y -q dataset-fashion-mnist \
		>/dev/null 2>&1 || (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q \
		dataset-fashion-mnist >/dev/null 2>&1) || \
		echo "note: no Debian dataset-fashion-mnist (needs root): the shipped-weights tests will fail"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,bench,backends,docs,onnx]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/highway-zoo demo

# Debian's Chromium and ChromeDriver, for the site's browser test (tests/test_site.py).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
		(apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium chromium-driver \
		>/dev/null 2>&1) || echo "note: no Debian chromium (needs root): the browser test will fail"

# The suite without the minute-long end-to-end runs (marked slow); CI runs both.
test: $(STAMP) browser
	$(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=15 -m "not slow" tests

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=15 -m slow tests

test-backends: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m backends tests

lint: $(STAMP)
	$(BIN)/ruff check layers zoo training highway_zoo benchmarks tests docs/_hooks docs/mutation

# Mutation testing of layers/ and zoo/analysis/ on a copy of HEAD (docs/mutation/README.md):
# on demand, not in CI; hours on 2 cores (MUTATION_BUDGET=SECONDS stops each target there).
mutation: $(STAMP)
	test -x $(BIN)/mutmut || $(BIN)/pip install --quiet -e ".[mutation]"
	MUTMUT=$(abspath $(BIN))/mutmut docs/mutation/run.sh

# The documentation site, strictly (a broken link, a missing reference or an undocumented
# public name fails; not --quiet, which drops the warnings --strict counts), into site/
# (ignored). Debian's Chromium is installed for the site's browser test (tests/test_site.py)
# when it is missing.
docs: $(STAMP) browser
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The built wheel in a fresh virtualenv outside the checkout (.ci/wheel_check).
wheel-check: $(STAMP)
	.ci/wheel_check $(VENV)

clean:
	rm -rf $(VENV) *.egg-info demo_out build site
