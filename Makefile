# One-command set-up: every target creates .venv from requirements/lock.txt when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tdrl-installed
# The same environment with the oldest supported tensordict (requirements/lock-min.txt): a venv
# whose own site-packages hold only the pins of lock-min.txt and that reads every other package
# from .venv (a .pth file adds .venv's site-packages after its own), so the backends are not
# installed twice and the old tensordict shadows the locked one.
MIN_VENV := .venv-min
MIN_STAMP := $(MIN_VENV)/.tdrl-installed

.PHONY: setup lint format test test-min bench demo clean

$(STAMP): requirements/lock.txt requirements/backends-*.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements/lock.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

setup: $(STAMP)

$(MIN_STAMP): $(STAMP) requirements/lock-min.txt
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(MIN_VENV)/bin/python -m pip install --quiet --no-deps --ignore-installed -r requirements/lock-min.txt
	$(MIN_VENV)/bin/python requirements/overlay_venv.py $(VENV)
	$(MIN_VENV)/bin/python requirements/overlay_venv.py --check
	@touch $(MIN_STAMP)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: lint
	$(PY) -m pytest

# The tests marked slow exercise the JAX simulators and a Ray cluster (covered by `make test`),
# not the tensordict version: test-min leaves them out to keep CI short.
test-min: $(MIN_STAMP)
	$(MIN_VENV)/bin/python -m pytest -m "not slow"

demo: setup
	$(PY) -m tdrl demo

bench: setup
	$(PY) -m tdrl bench

clean:
	rm -rf $(VENV) $(MIN_VENV) build *.egg-info
