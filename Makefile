# Everything installs from nothing: `make test` and `make serve` create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
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

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -q

bench: $(STAMP)
	mkdir -p bench-results
	$(BIN)/python bench/sim_hour.py | tee bench-results/sim_hour.txt
	@for b in gateway_overhead ws_session loadgen_ceiling remote_hop; do \
	  if [ -f bench/$$b.py ]; then $(BIN)/python bench/$$b.py | tee bench-results/$$b.txt; fi; \
	done

clean:
	rm -rf $(VENV) bench-results .pytest_cache .ruff_cache
