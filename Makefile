# The one test command is `make test` (README); CI runs it through .ci/run with CI=true.
#
# The suite runs on every supported interpreter: 3.11 in `.venv` (also lint, types, docs and the
# coverage gate), 3.12 and 3.13 each in its own `.venv-3.x`, found under `pyenv root` (tests
# marked `once` check artefacts such as the wheel and the docs build: 3.11 runs them). With
# CI=true a missing interpreter fails the run; elsewhere it is skipped with a warning.
PYENV_ROOT := $(shell pyenv root 2>/dev/null)
# The newest installed patch release of a minor version under pyenv (empty when none).
pyenv_python = $(shell ls -d $(PYENV_ROOT)/versions/$(1).*/bin/python 2>/dev/null | sort -V | tail -n 1)
PYTHON ?= $(or $(call pyenv_python,3.11),python3)
EXTRA_PYTHONS := 3.12 3.13
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Four workers on CI's two cores: most of the suite waits in real time (leases, servers,
# processes), so two workers left two-thirds of the CPU idle (3.12: 2.4 CPU-min in 3.6 min);
# work stealing keeps a long test from ending the run alone on one worker (docs/decisions.md).
XDIST := -n 4 --dist worksteal -p no:cacheprovider

.PHONY: test lint typecheck pytest docs demo bench soak clean install pytest-3.11 $(addprefix pytest-,$(EXTRA_PYTHONS))

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip  # dependency groups (--group) need pip >= 25.1
	$(BIN)/python -m pip install --quiet -e '.[redis]' --group dev
	touch $(STAMP)

# A test-only venv per extra interpreter (no linters or docs tools: those run once, on 3.11).
.venv-%/.installed: pyproject.toml
	@py="$(call pyenv_python,$*)"; \
	if [ -z "$$py" ]; then \
		echo "Python $* is not installed under pyenv ($(PYENV_ROOT)): 'pyenv install $*'"; \
		if [ "$(CI)" = "true" ]; then echo "FAIL: CI runs the suite on 3.11, 3.12 and 3.13"; exit 1; fi; \
		echo "WARNING: skipping Python $* (not CI)"; exit 0; \
	fi; \
	set -e; test -x .venv-$*/bin/python || "$$py" -m venv .venv-$*; \
	.venv-$*/bin/python -m pip install --quiet --upgrade pip; \
	.venv-$*/bin/python -m pip install --quiet -e '.[redis]' --group test; \
	touch $@

install: $(STAMP) $(foreach v,$(EXTRA_PYTHONS),.venv-$(v)/.installed)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy resilience tests/typing
	$(BIN)/pyright tests/typing

# Every interpreter's stage runs even when an earlier one fails: the run reports them all and
# fails at the end (a red 3.11 must not hide the state of 3.12 and 3.13).
pytest:
	@failed=""; \
	for stage in 3.11 $(EXTRA_PYTHONS); do \
		$(MAKE) --no-print-directory pytest-$$stage || failed="$$failed $$stage"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAIL: the pytest stage failed on Python$$failed"; exit 1; fi; \
	echo "== pytest passed on Python 3.11 $(EXTRA_PYTHONS)"

pytest-3.11: $(STAMP)
	@$(BIN)/python -c 'import sys; print("== pytest with coverage on Python", sys.version.split()[0]); \
		sys.exit("FAIL: CI runs 3.11 in $(VENV): install it under pyenv" if "$(CI)" == "true" and sys.version_info[:2] != (3, 11) else 0)'
	$(BIN)/pytest --cov --cov-report=term -q $(XDIST)

$(addprefix pytest-,$(EXTRA_PYTHONS)): pytest-%: .venv-%/.installed
	@if [ -x .venv-$*/bin/pytest ]; then \
		.venv-$*/bin/python -c 'import sys; print("== pytest on Python", sys.version.split()[0])' && \
		.venv-$*/bin/pytest -q $(XDIST) -m "not soak and not once"; \
	fi

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint typecheck docs pytest

demo: $(STAMP)
	@for example in examples/quickstart.py $(filter-out examples/quickstart.py,$(sort $(wildcard examples/*.py))); do \
		echo "== $$example"; $(BIN)/python $$example || exit 1; done

bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[redis]' --group dev --group bench
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/lean.py --svg
	$(BIN)/python benchmarks/classic.py
	$(BIN)/python benchmarks/plots.py
	$(BIN)/python benchmarks/telemetry.py
	$(BIN)/python benchmarks/chaos_registry.py
	$(BIN)/python benchmarks/fallback.py
	$(BIN)/python benchmarks/hedging.py
	$(BIN)/python benchmarks/lock_memory.py
	$(BIN)/python benchmarks/redis_lock.py
	$(BIN)/python benchmarks/redis_contention.py
	$(BIN)/python benchmarks/election_handoff.py
	$(BIN)/python benchmarks/http_transport.py --server raw
	$(BIN)/python benchmarks/http_transport.py --server stdlib
	$(BIN)/python benchmarks/circuit_fleet.py
	$(BIN)/python benchmarks/postgres_lock.py
	$(BIN)/python benchmarks/rate_limit.py

# The long reliability runs (tests/reliability, marked soak); SOAK_SECONDS scales them.
# They run on every interpreter (3.12 and 3.13 too when installed).
soak: $(STAMP) $(foreach v,$(EXTRA_PYTHONS),.venv-$(v)/.installed)
	$(BIN)/pytest tests/reliability -m soak -q -s -p no:cacheprovider
	@for v in $(EXTRA_PYTHONS); do if [ -x .venv-$$v/bin/pytest ]; then \
		echo "== soak on Python $$v"; .venv-$$v/bin/pytest tests/reliability -m soak -q -s -p no:cacheprovider || exit 1; \
	fi; done

clean:
	rm -rf $(VENV) $(addprefix .venv-,$(EXTRA_PYTHONS)) .mypy_cache .pytest_cache .ruff_cache .coverage htmlcov dist
