# Everything installs from nothing: `make test` and `make serve` create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SOAK_MINUTES ?= 10  # bench/soak.py: `make bench SOAK_MINUTES=1` for a short one
STAMP := $(VENV)/.installed-stamp

.PHONY: install serve test lint bench test-integration clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/fastmode serve

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q -n 2 --dist loadfile --durations=15  # two workers, a test file each at a time

# The docker-compose topology without Docker: docker-compose.yml's services as local processes
# on free loopback ports, the integration suite against them (scripts/integration.py), after a
# check that every command the compose file runs exists (docker-compose config -q if installed).
test-integration: $(STAMP)
	$(BIN)/python scripts/check_compose.py
	$(BIN)/python scripts/integration.py

bench: $(STAMP)
	mkdir -p bench-results
	$(BIN)/python bench/sim_hour.py | tee bench-results/sim_hour.txt
	@for b in pacing fast_share gateway_overhead loadgen_ceiling mixed_run ws_session remote_hop workers redis_state calibration prefix_cache vllm_bench_serve structured; do \
	  if [ -f bench/$$b.py ]; then $(BIN)/python bench/$$b.py | tee bench-results/$$b.txt; fi; \
	done
	$(BIN)/python bench/soak.py --minutes $(SOAK_MINUTES) --json bench-results/soak.json \
	  | tee bench-results/soak.txt

clean:
	rm -rf $(VENV) bench-results .pytest_cache .ruff_cache
