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

test: $(VENV)/.requirements-dev shellcheck arm-tools
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

# the Arm checks of the fused kernels (tests/models/test_kernels_aarch64.py): Debian's aarch64 cross
# compiler, qemu-user to run its output, and Debian's oneDNN 2 (a libdnnl the build must not link)
ARM_TOOLS := g++-aarch64-linux-gnu qemu-user libdnnl2
arm-tools:
	@{ command -v aarch64-linux-gnu-g++ && command -v qemu-aarch64 && ls /usr/lib/*-linux-gnu/libdnnl.so.2; } >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq $(ARM_TOOLS) >/dev/null; \
	  else sudo apt-get update -qq && sudo apt-get install -y -qq $(ARM_TOOLS) >/dev/null; fi; }

.PHONY: arm-tools
