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

# The installed package maps `conduit.daemon` -> daemon/ and `conduit.adapters` -> adapters/ (pyproject's
# package-dir). mypy and import-linter find modules by folder, so they read a link tree that has that shape:
# build/typecheck/conduit/{kernel files, daemon -> ../../../daemon, adapters -> ../../../adapters}.
TREE := build/typecheck

lint: setup
	$(BIN)/ruff check daemon adapters conduit tests bench
	@rm -rf $(TREE) && mkdir -p $(TREE)/conduit
	@for f in conduit/*; do ln -s ../../../$$f $(TREE)/conduit/; done
	@ln -s ../../../daemon $(TREE)/conduit/daemon && ln -s ../../../adapters $(TREE)/conduit/adapters
	cd $(TREE) && PYTHONPATH=. ../../$(BIN)/lint-imports --config ../../pyproject.toml
	cd $(TREE) && ../../$(BIN)/mypy --config-file ../../pyproject.toml -p conduit

# Everything, including the real-vLLM tier (which builds or reuses its venv outside the repo).
test: lint
	$(BIN)/python -m pytest -q

# Without the real-vLLM tier.
test-fast: lint
	$(BIN)/python -m pytest -q -m "not vllm"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
