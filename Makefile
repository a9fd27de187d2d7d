# `make regenerate` and `make test` each set up .venv when it is missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# Interpreter tests are CPU bound: one worker per core. worksteal: a few tests run for a minute
# (the tuner self-test, the bench smoke test); an idle worker takes pending tests from a busy one.
JOBS ?= auto

.PHONY: setup regenerate check test test-gpu clean

# --no-compile: Python byte-compiles the modules a run imports, not all of torch at install time
$(STAMP): requirements-dev.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-compile -r requirements-dev.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -c "$$WARM_IMPORTS"
	touch $(STAMP)

# Byte-code for the installed modules a test run imports, written once: where the environment
# sets PYTHONDONTWRITEBYTECODE, every process (each xdist worker, each tool or CLI a test runs)
# would compile torch's modules again on import, 3 s of a 4 s import. torch.compile's own
# imports (the aot_eager tests) come with one tiny compiled call.
define WARM_IMPORTS
import numpy, attr, jinja2, pytest, xdist, torch, triton.runtime.interpreter
torch.compile(torch.neg, backend="aot_eager")(torch.ones(2))
endef
export WARM_IMPORTS

setup: $(STAMP)

regenerate: $(STAMP)
	$(BIN)/codegen regenerate

check: $(STAMP)
	$(BIN)/codegen regenerate --check

test: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/codegen regenerate --check
	PYTHONHASHSEED=4242 $(BIN)/codegen regenerate --check
	$(BIN)/python -m pytest -q -n $(JOBS) --dist worksteal tests

# On a machine with a GPU (on an H200, tools/gpu_check.sh runs these and the benchmark).
test-gpu:
	python3 -m pytest -q -m gpu tests

clean:
	rm -rf $(VENV) .pytest_cache
