# Two entry points (see README.md): `make demo` lints the bundled example, `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch for the tests: the CPU build is enough. A $(PYTHON) that already has torch (a GPU machine)
# lends it to the venv instead; without the CPU wheel index, scripts/install_torch.sh falls back to
# the configured index (README: "Quick start"). TORCH_INDEX= skips the CPU index.
TORCH_VERSION ?= 2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
HOST_TORCH := $(shell $(PYTHON) -c "import importlib.util as u; print('yes' if u.find_spec('torch') else '')" 2>/dev/null)
PYTEST_ARGS ?= -n 2 -q

$(BIN)/graphready: pyproject.toml
	$(PYTHON) -m venv $(if $(HOST_TORCH),--system-site-packages) $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.dev: $(BIN)/graphready
	scripts/install_torch.sh $(BIN)/python "$(TORCH_VERSION)" "$(TORCH_INDEX)"
	$(BIN)/python -m pip install -q -e ".[dev,docs]"  # docs: tests/test_docs.py runs mkdocs build --strict
	touch $@

.PHONY: demo test
demo: $(BIN)/graphready
	@# exit 1 means "hazards found", which is the point of the example
	$(BIN)/graphready lint examples/decoder --show-chain --statistics || [ $$? -eq 1 ]

test: $(VENV)/.dev
	$(BIN)/python -m pytest $(PYTEST_ARGS)
