# Newcomer entry points:
#   make lab   - create .venv, install, open JupyterLab on notebooks/ with the extension loaded
#   make test  - create .venv, install, lint and run the whole test suite
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

.PHONY: setup system-deps cpp-ext lint test lab

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(PY)
	printf '%s\n' $(TORCH_PINS) > $(CONSTRAINTS)
	$(PIP) install $(TORCH_PINS)
	$(PIP) install -c $(CONSTRAINTS) -e '.[dev]'
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

# Lint findings must not hide test results: run both, fail if either failed.
test: setup
	@status=0; \
	$(VENV)/bin/ruff check . || status=1; \
	JUPYTER_COMPILE_REQUIRE_BROWSER=1 $(VENV)/bin/pytest $(PYTEST_ARGS) || status=1; \
	exit $$status

# Each notebook starts with `%load_ext jupyter_compile` (loading it for every kernel as well
# would make that line print "already loaded"), so a notebook works the same in make lab,
# on Binder and after a plain `pip install jupyter-compile`.
lab: setup
	@echo "Notebooks load the extension with: %load_ext jupyter_compile"
	$(VENV)/bin/jupyter lab $(if $(SUDO),,--allow-root) notebooks/
