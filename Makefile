# Two entry points (see README.md): `make demo` lints the bundled example, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build is enough for the test suite; on a GPU machine use the torch you already have.
TORCH ?= torch==2.13.0
PYTEST_ARGS ?= -n 2 -q

$(BIN)/graphready: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(BIN)/graphready
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $@

.PHONY: demo test
demo: $(BIN)/graphready
	@# exit 1 means "hazards found", which is the point of the example
	$(BIN)/graphready lint examples/decoder --show-chain --statistics || [ $$? -eq 1 ]

test: $(VENV)/.dev
	$(BIN)/python -m pytest $(PYTEST_ARGS)
