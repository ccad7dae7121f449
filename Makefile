# Newcomer entry points:
#   make lab   - create .venv, install, open JupyterLab on notebooks/ with the extension loaded
#   make test  - create .venv, install, lint and run the whole test suite; then create .venv313
#                and .venv312 and run the tracer suite on Python 3.13 and 3.12 as well
#
# torch and torchvision are pinned and installed first; a constraints file keeps every later
# install (transformers, timm, ...) from pulling another torch.

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.setup-done
CONSTRAINTS := $(VENV)/constraints.txt
TORCH_PINS := torch==2.14.1 torchvision==0.29.1
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

# The second environment: the tracer decodes each Python's bytecode, so its suite runs on the
# newest Python it supports too. Python 3.13 is the one on PATH, else pyenv's.
PYTHON313 ?= $(firstword $(shell python3.13 -c 'import sys; print(sys.executable)' 2>/dev/null) \
	$(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13))
VENV313 := .venv313
PY313 := $(VENV313)/bin/python
STAMP313 := $(VENV313)/.setup-done
TESTS313 ?= tests/tracer tests/backends

# The third: Python 3.12, whose bytecode differs from both 3.11's and 3.13's. It takes the same
# pinned torch: the project installs no other. The H200's torch (2.11, whose
# autograd.Function.apply, composite kernels and fake tensors differ from 2.14's) is checked
# on the device by benchmarks/gpu_checks.sh's tracer run.
PYTHON312 ?= $(firstword $(shell python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null) \
	$(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12))
VENV312 := .venv312
PY312 := $(VENV312)/bin/python
STAMP312 := $(VENV312)/.setup-done
TESTS312 ?= $(TESTS313)

.PHONY: setup system-deps cpp-ext lint test test313 test312 lab

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(PY)
	printf '%s\n' $(TORCH_PINS) > $(CONSTRAINTS)
	$(PIP) install $(TORCH_PINS)
	$(PIP) install -c $(CONSTRAINTS) -e '.[dev]'
	touch $@

$(PY313):
	$(PYTHON313) -m venv $(VENV313)

$(STAMP313): pyproject.toml Makefile | $(PY313)
	printf '%s\n' $(TORCH_PINS) > $(VENV313)/constraints.txt
	$(PY313) -m pip install $(TORCH_PINS)
	$(PY313) -m pip install -c $(VENV313)/constraints.txt -e '.[dev]'
	touch $@

$(PY312):
	$(PYTHON312) -m venv $(VENV312)

$(STAMP312): pyproject.toml Makefile | $(PY312)
	printf '%s\n' $(TORCH_PINS) > $(VENV312)/constraints.txt
	$(PY312) -m pip install $(TORCH_PINS)
	$(PY312) -m pip install -c $(VENV312)/constraints.txt -e '.[dev]'
	touch $@

setup: $(STAMP) system-deps cpp-ext

# The C++ extension (compiler/runtime/csrc/: tensor guards, CUDA graph outputs, optimizer
# gradient grouping, Triton kernel launches; a few seconds), built here so a first compile
# never waits for it; a cache hit when built. Without it all of these run in Python.
cpp-ext: $(STAMP)
	$(PY) -m compiler.runtime.cpp_ext build || echo "the C++ extension's work stays in Python"

# graphviz's `dot` renders the inspector's graphs; chromium drives the browser test.
system-deps:
	@if ! command -v dot >/dev/null 2>&1 || [ ! -x /usr/bin/chromium ]; then \
		$(SUDO) apt-get update && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y graphviz chromium chromium-driver; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Lint findings must not hide test results: run all, fail if any failed.
test: setup
	@status=0; \
	$(VENV)/bin/ruff check . || status=1; \
	JUPYTER_COMPILE_REQUIRE_BROWSER=1 $(VENV)/bin/pytest $(PYTEST_ARGS) || status=1; \
	$(MAKE) --no-print-directory test313 || status=1; \
	$(MAKE) --no-print-directory test312 || status=1; \
	exit $$status

# Without a Python 3.13 a newcomer's `make test` says so and goes on; CI must have one.
ifeq ($(PYTHON313),)
test313:
	@echo "No Python 3.13 found (set PYTHON313=...): the tracer suite did not run on 3.13"; \
	test "$$CI" != true
else
test313: $(STAMP313)
	$(VENV313)/bin/pytest $(TESTS313)
endif

# The same for Python 3.12.
ifeq ($(PYTHON312),)
test312:
	@echo "No Python 3.12 found (set PYTHON312=...): the tracer suite did not run on 3.12"; \
	test "$$CI" != true
else
test312: $(STAMP312)
	$(VENV312)/bin/pytest $(TESTS312)
endif

# Each notebook starts with `%load_ext jupyter_compile` (loading it for every kernel as well
# would make that line print "already loaded"), so a notebook works the same in make lab,
# on Binder and after a plain `pip install jupyter-compile`.
lab: setup
	@echo "Notebooks load the extension with: %load_ext jupyter_compile"
	$(VENV)/bin/jupyter lab $(if $(SUDO),,--allow-root) notebooks/
