# gputop: `make demo` installs gputop with its runtime dependencies only into .venv and runs
# the demo; `make test` adds the test tools (requirements/test.lock) and runs every check;
# `make test-fast` the tests that start no real trainers, terminals or gputop processes.
# The interpreter .venv is made from: the distribution's where it serves (scripts/venv_python).
PYTHON ?= $(shell scripts/venv_python)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
RUNTIME := $(VENV)/.runtime-stamp
TESTING := $(VENV)/.test-stamp

.PHONY: demo test test-fast test-snapshot-update lint bench bench-quick screenshots truth-table gpu-check hw-check clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# gputop itself is installed editable; pip builds it with hatchling in a throwaway env.
$(RUNTIME): pyproject.toml requirements/runtime.lock | $(PY)
	$(PIP) -r requirements/runtime.lock
	$(PIP) --no-deps -e .
	touch $@

$(TESTING): requirements/test.lock $(RUNTIME)
	$(PIP) -r requirements/test.lock
	touch $@

demo: $(RUNTIME)
	@echo "gputop is $(CURDIR)/$(VENV)/bin/gputop (put $(CURDIR)/$(VENV)/bin on PATH," \
	      "or install it for good with: pipx install $(CURDIR))"
	$(VENV)/bin/gputop --demo

lint: $(TESTING)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Two passes: the tests that judge nothing by speed run side by side (a worker a core, four
# at most), then those marked `alone` (samples/s before and after advice, idle cores, waits
# for a core, memory-bandwidth pressure) one at a time with nothing beside them.
# --durations: the slowest tests named in every CI log (the suite should stay well under 20 min)
XDIST := -n auto --maxprocesses 4
test: lint
	$(PY) -m pytest -q $(XDIST) -m "not alone" --durations=15
	$(PY) -m pytest -q -m alone --durations=15

test-fast: $(TESTING)
	$(PY) -m pytest -q $(XDIST) -m "not slow and not alone"
	$(PY) -m pytest -q -m "not slow and alone"

bench: $(TESTING)
	$(PY) benchmarks/run_all.py

bench-quick: $(TESTING)
	$(PY) benchmarks/run_all.py --quick

test-snapshot-update: $(TESTING)
	$(PY) -m pytest tests/tui/test_snapshots.py --snapshot-update

screenshots: $(TESTING)
	$(PY) scripts/screenshots.py

# gputop's verdicts beside hand timers in the loops of real trainers (docs/advice.md's table)
truth-table: $(TESTING)
	$(PY) scripts/truth_table.py

gpu-check:
	PYTHONPATH=$(CURDIR) python3 scripts/gpu_check.py
	PYTHONPATH=$(CURDIR) python3 scripts/gpu_check_probe.py
	PYTHONPATH=$(CURDIR) python3 scripts/gpu_check_advice.py

hw-check:
	PYTHONPATH=$(CURDIR) python3 scripts/hw_check.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
