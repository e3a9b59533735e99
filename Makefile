# The two commands of the README: `make demo` and `make test`. Both create .venv when absent.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: demo test test-slow test-lite lite-venv dev bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

# Stamp files named by the requirement files' contents: a change to one of them installs again, their
# dates do not (a fresh clone beside a .venv linked or copied from another checkout installs nothing).
stamp = $(VENV)/.installed-$(1)-$(shell cat $(2) | sha256sum | cut -c1-16)
RUN_REQS := requirements.txt
DEMO_REQS := $(RUN_REQS) requirements-demo.txt
DEV_REQS := $(DEMO_REQS) requirements-dev.txt requirements-onnx.txt
RUN_STAMP := $(call stamp,run,$(RUN_REQS))
DEMO_STAMP := $(call stamp,demo,$(DEMO_REQS))
DEV_STAMP := $(call stamp,dev,$(DEV_REQS))

$(RUN_STAMP): | $(PY)
	$(PIP) install -r requirements.txt
	$(PY) -m src.models.layers.cpu_kernels  # fused CPU kernels (g++); without them the operator forms run
	touch $@

$(DEMO_STAMP): | $(RUN_STAMP)
	$(PIP) install -r requirements-demo.txt
	touch $@

$(DEV_STAMP): | $(DEMO_STAMP)
	$(PIP) install -r requirements-dev.txt
	touch $@

# Debian packages the tests use: shellcheck (the shell scripts), and for the Arm checks of the fused kernels
# (tests/models/test_kernels_aarch64.py) the aarch64 cross compiler, qemu-user to run its output and Debian's
# oneDNN 2 (a libdnnl the build must not link). `make test` never runs sudo: as root (CI, a container) it
# installs what is missing; otherwise it prints one line naming the packages and the command that installs
# them, and the tests that need them skip with that reason (with CI=1 they stop the run: tests/conftest.py).
ARM_TOOLS := g++-aarch64-linux-gnu qemu-user libdnnl2
have_shellcheck = command -v shellcheck
have_arm_tools = command -v aarch64-linux-gnu-g++ && command -v qemu-aarch64 && ls /usr/lib/*-linux-gnu/libdnnl.so.2
apt_install = apt-get update -qq && apt-get install -y -qq $(1) >/dev/null
# $(call install_as_root,<packages>,<target>): installs as root; else one line with the command, and fails
install_as_root = if [ "$$(id -u)" = 0 ]; then $(call apt_install,$(1)); \
	  else echo "error: installing $(1) needs root: run sudo make $(2)" >&2; exit 1; fi

shellcheck:
	@{ $(have_shellcheck); } >/dev/null 2>&1 || { $(call install_as_root,shellcheck,shellcheck); }

arm-tools:
	@{ $(have_arm_tools); } >/dev/null 2>&1 || { $(call install_as_root,$(ARM_TOOLS),arm-tools); }

test-tools:
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory shellcheck arm-tools; else \
	  missing=""; how=""; \
	  { $(have_shellcheck); } >/dev/null 2>&1 || { missing=" shellcheck"; how=" shellcheck"; }; \
	  { $(have_arm_tools); } >/dev/null 2>&1 || { missing="$$missing $(ARM_TOOLS)"; how="$$how arm-tools"; }; \
	  if [ -n "$$missing" ]; then echo "note: not installed (Debian packages):$$missing; the tests that need" \
	    "them skip; install them with: sudo make$$how"; fi; fi

# the venv with every test dependency and the Debian test tools: what the test targets need, installed once
# (.ci/run installs it before it starts make test and the jobs beside it, which then install nothing)
dev: $(DEV_STAMP) test-tools

# pytest-xdist: the test files spread over TEST_WORKERS processes (a file's tests stay in one, so its module
# fixtures are made once); most tests run one thread of MindSpore, so 2 workers use both cores of CI's machine
TEST_WORKERS ?= 2
test: $(DEV_STAMP) test-tools
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

# the multi-process fault tests (pytest marker `slow`, left out of `make test`); CI runs both. On TEST_WORKERS
# processes too: much of their time is waiting on cluster timeouts (8 passed in 11 min 16 s at load 7, 2 workers)
test-slow: $(DEV_STAMP) test-tools
	$(PY) -m pytest -m slow -n $(TEST_WORKERS) --dist loadfile

# the C++ app (ascend310_infer/) on a real MindSpore Lite runtime (pytest marker `lite`): PyPI's
# mindspore-lite 2.0.0 wheel and a Python 3.7 venv holding it, made once in LITE_CACHE (outside git)
LITE_CACHE ?= $(HOME)/.cache/nfnet-mindspore/lite
test-lite: $(DEV_STAMP) test-tools
	NFNET_LITE_CACHE=$(LITE_CACHE) $(PY) -m pytest -m lite tests/deploy/test_lite_runtime.py

# PyPI's mindspore-lite wheel in a Python 3.7 venv in LITE_CACHE (benchmarks/lite_venv.py), made once
lite-venv: $(DEV_STAMP)
	NFNET_LITE_CACHE=$(LITE_CACHE) $(PY) -m benchmarks.lite_venv

# side-by-side speed against timm (issue 6): table, benchmarks/results.json, benchmarks/results.png; without
# the Lite venv (no Python 3.7, no PyPI) the bench runs on and its Lite row says why it is missing
bench: $(DEV_STAMP)
	-NFNET_LITE_CACHE=$(LITE_CACHE) $(PY) -m benchmarks.lite_venv
	NFNET_LITE_CACHE=$(LITE_CACHE) $(PY) benchmarks/bench.py

demo: $(DEMO_STAMP)
	bash scripts/run_demo.sh

# what the commands write in the checkout: the demo, runs, inference and preprocessing results, builds
clean:
	rm -rf outputs output runs pre data/digits .pytest_cache ascend310_infer/out ascend310_infer/build \
	  preprocess_Result result_Files time_Result scripts/preprocess_Result scripts/result_Files scripts/time_Result
	rm -f acc.log acc.json preprocess.log infer.log build.log scripts/acc.log scripts/acc.json scripts/*.log

.PHONY: shellcheck arm-tools test-tools
