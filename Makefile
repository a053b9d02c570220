# The two commands of a fresh machine (README): `make demo` runs the main job, `make test` runs the tests.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast test-tools lint docs clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/conduit demo

# Folder = import path: conduit/daemon and conduit/adapters are committed links to the top-level folders, so
# mypy and import-linter run from the repository root. mkdocs builds the manual strictly (docs/, mkdocs.yml),
# offline, into build/site (ignored); a broken link, anchor or nav entry fails the lint.
lint: setup
	$(BIN)/ruff check daemon adapters conduit tests bench docs/gen_reference.py
	$(BIN)/lint-imports
	$(BIN)/mypy -p conduit
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

# The reference pages of the manual (docs/reference/*.md), written from the code: the adapter registry, the
# profile's models, the agent's OpenAPI document, the command tree. tests/test_docs.py fails when one is stale.
docs: setup
	$(BIN)/python docs/gen_reference.py

# The fast tier runs on 4 pytest-xdist workers (`make test-fast PYTEST_WORKERS=0` runs it serially): most of
# its tests wait on subprocesses and sockets, so 4 workers keep 2 cores busy where `-n auto` (2) leaves them
# idle. `--dist loadgroup` hands out single tests, except those marked `xdist_group` (a module-scoped server),
# which stay on one worker. Every test has its own HOME, ports from the kernel and deadlines that poll, so
# the order does not matter; tests/helpers/isolation.py (TERMINAL_VARS) says why COLUMNS/LINES are cleared. The
# real-vLLM and real-tool tiers always run serially: a vLLM server uses both cores.
PYTEST_WORKERS ?= 4
FAST := $(BIN)/python -m pytest -q -m "not vllm and not realtools" -n $(PYTEST_WORKERS) --dist loadgroup

# Everything: the fast tier, then the real-vLLM tier (which builds or reuses its venv outside the repo),
# then the real-tool tier (which installs or reuses the seven tools outside the repo), each serially.
test: lint
	$(FAST)
	$(BIN)/python -m pytest -q -m vllm
	$(BIN)/python -m pytest -q -m realtools

# The real-tool tier alone.
test-tools: setup
	$(BIN)/python -m pytest -q -m realtools

# Without the real-vLLM tier.
test-fast: lint
	$(FAST)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
