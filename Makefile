# One-command set-up: every target creates .venv from requirements/lock.txt when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tdrl-installed

.PHONY: setup lint format test bench demo clean

$(STAMP): requirements/lock.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements/lock.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

setup: $(STAMP)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: lint
	$(PY) -m pytest

demo: setup
	$(PY) -m tdrl demo

bench: setup
	$(PY) -m tdrl bench

clean:
	rm -rf $(VENV) build *.egg-info
