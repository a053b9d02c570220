# The two commands of a fresh machine (README): `make demo` runs the main job, `make test` runs the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/conduit demo

lint: setup
	$(BIN)/ruff check daemon adapters conduit tests bench
	$(BIN)/mypy daemon adapters conduit

# Everything, including the real-vLLM tier (which builds or reuses its venv outside the repo).
test: lint
	$(BIN)/python -m pytest -q

# Without the real-vLLM tier.
test-fast: lint
	$(BIN)/python -m pytest -q -m "not vllm"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
