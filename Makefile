# The two commands of the README: `make demo` and `make test`. Both create .venv when absent.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test test-slow test-lite bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# Stamp files: reinstall only when a requirements file changes.
$(VENV)/.requirements: requirements.txt | $(PY)
	$(PIP) install -r requirements.txt
	$(PY) -m src.models.layers.cpu_kernels  # fused CPU kernels (g++); without them the operator forms run
	touch $@

$(VENV)/.requirements-demo: requirements-demo.txt $(VENV)/.requirements
	$(PIP) install -r requirements-demo.txt
	touch $@

$(VENV)/.requirements-dev: requirements-dev.txt $(VENV)/.requirements-demo
	$(PIP) install -r requirements-dev.txt
	touch $@

# shellcheck (Debian package) checks the shell scripts in the tests
shellcheck:
	@command -v shellcheck >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq shellcheck >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq shellcheck >/dev/null; fi; }

test: $(VENV)/.requirements-dev shellcheck
	$(PY) -m pytest

# the multi-process fault tests (pytest marker `slow`, left out of `make test`); CI runs both
test-slow: $(VENV)/.requirements-dev shellcheck
	$(PY) -m pytest -m slow

# the C++ app (ascend310_infer/) on a real MindSpore Lite runtime (pytest marker `lite`): PyPI's
# mindspore-lite 2.0.0 wheel and a Python 3.7 venv holding it, made once in LITE_CACHE (outside git)
LITE_CACHE ?= $(HOME)/.cache/nfnet-mindspore/lite
test-lite: $(VENV)/.requirements-dev shellcheck
	NFNET_LITE_CACHE=$(LITE_CACHE) $(PY) -m pytest -m lite tests/deploy/test_lite_runtime.py

# side-by-side speed against timm (issue 6): table, benchmarks/results.json, benchmarks/results.png
bench: $(VENV)/.requirements-dev
	$(PY) benchmarks/bench.py

demo: $(VENV)/.requirements-demo
	bash scripts/run_demo.sh

clean:
	rm -rf outputs data/digits .pytest_cache

.PHONY: shellcheck
