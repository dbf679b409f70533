# gputop: `make demo` runs the demo, `make test` runs every check, `make test-fast` the tests
# that start no real trainers, terminals or gputop processes. All set up .venv first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-fast test-snapshot-update lint bench screenshots gpu-check hw-check clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

demo: $(STAMP)
	$(VENV)/bin/gputop --demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q

test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow"

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

test-snapshot-update: $(STAMP)
	$(PY) -m pytest tests/tui/test_snapshots.py --snapshot-update

screenshots: $(STAMP)
	$(PY) scripts/screenshots.py

gpu-check:
	PYTHONPATH=$(CURDIR) python3 scripts/gpu_check.py
	PYTHONPATH=$(CURDIR) python3 scripts/gpu_check_probe.py

hw-check:
	PYTHONPATH=$(CURDIR) python3 scripts/hw_check.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
