# The one test command is `make test` (README); CI runs it through .ci/run with CI=true.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test lint typecheck pytest docs demo bench soak clean install

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip  # dependency groups (--group) need pip >= 25.1
	$(BIN)/python -m pip install --quiet -e '.[redis]' --group dev
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy resilience tests/typing
	$(BIN)/pyright tests/typing

pytest: $(STAMP)
	$(BIN)/pytest --cov --cov-report=term -q

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck docs pytest

demo: $(STAMP)
	@for example in examples/quickstart.py $(filter-out examples/quickstart.py,$(sort $(wildcard examples/*.py))); do \
		echo "== $$example"; $(BIN)/python $$example || exit 1; done

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[redis]' --group dev --group bench
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/classic.py
	$(BIN)/python benchmarks/plots.py
	$(BIN)/python benchmarks/telemetry.py
	$(BIN)/python benchmarks/chaos_registry.py
	$(BIN)/python benchmarks/fallback.py
	$(BIN)/python benchmarks/hedging.py
	$(BIN)/python benchmarks/lock_memory.py
	$(BIN)/python benchmarks/redis_lock.py
	$(BIN)/python benchmarks/redis_contention.py
	$(BIN)/python benchmarks/circuit_fleet.py
	$(BIN)/python benchmarks/postgres_lock.py
	$(BIN)/python benchmarks/rate_limit.py

# The long reliability runs (tests/reliability, marked soak); SOAK_SECONDS scales them.
soak: $(STAMP)
	$(BIN)/pytest tests/reliability -m soak -q -s -p no:cacheprovider

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .coverage htmlcov dist
