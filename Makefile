# Fresh machine: `make demo` or `make test` do all set-up (a .venv with the package
# and its extras) and run. `make test-quick` skips the slow end-to-end tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: test test-quick demo lint clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev,train,serve,grpo,data]"
	touch $(STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

test: $(STAMP) lint
	$(PY) -m pytest -q -p no:cacheprovider --durations=15

test-quick: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

demo: $(STAMP)
	$(PY) -m demo --output-dir demo_output

clean:
	rm -rf $(VENV) demo_output .pytest_cache
