# Everything installs from nothing: `make serve` and `make test` create .venv when missing, and
# `make test` installs the programs its tests run (scripts/system_deps.sh) first.
# The venv's interpreter: the fastest CPython 3.11 here (scripts/python.sh says how it is chosen)
PY ?= $(shell bash scripts/python.sh)
# Bytecode is cached (this machine's image sets PYTHONDONTWRITEBYTECODE=1): the suite starts a
# hundred-odd Python processes (servers, workers, CLIs), each of which otherwise compiled every
# module from source again (collection 11.6 -> 6.0 s a worker; the suite's CPU 291 -> 251 s)
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
BIN := $(VENV)/bin
# uv installs the pinned set (constraints.txt pins every package, so nothing is resolved anew)
# in ~7 s from nothing, where pip took ~56 s of a 5-minute CI; pip installs uv itself, and
# does the install if uv cannot (the pip that the venv ships, Python 3.11: 23.2, is enough)
UV_VERSION := 0.13.9
UV := $(BIN)/uv
INSTALL := $(UV) pip install -q --python $(BIN)/python -c constraints.txt
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt
# bench/soak.py: `make bench SOAK_MINUTES=1` for a short one
SOAK_MINUTES ?= 10
# installed: what `fastmode serve` needs (`make serve`), and that plus the tests', linters' and
# benchmarks' packages ([dev]: `make test`, `make lint`, `make bench`)
RUNTIME_STAMP := $(VENV)/.runtime-stamp
DEV_STAMP := $(VENV)/.dev-stamp

.PHONY: install dev serve test lint bench test-integration system-deps lock clean agents \
  agents-latest test-agents-latest

$(BIN)/python:
	$(PY) -m venv $(VENV)

# (`-`: if uv cannot be installed, the installs below fall back to pip)
$(UV): | $(BIN)/python
	-$(BIN)/python -m pip install -q --disable-pip-version-check uv==$(UV_VERSION)

$(RUNTIME_STAMP): pyproject.toml constraints.txt | $(UV)
	$(INSTALL) -e . || $(PIP) -e .
	touch $@

# [dev] includes the runtime's packages: one install, one resolve (CI installs from nothing)
# bench/ and scripts/ are programs in the checkout, not in the wheel: a .pth puts the checkout on
# the dev venv's path, so `python bench/NAME.py` imports bench.harness
$(DEV_STAMP): pyproject.toml constraints.txt | $(UV)
	$(INSTALL) -e '.[dev]' || $(PIP) -e '.[dev]'
	$(BIN)/python -c "import pathlib, sysconfig; pathlib.Path(sysconfig.get_path('purelib'), 'fastmode-checkout.pth').write_text('$(CURDIR)\n')"
	touch $(RUNTIME_STAMP) $@

install: $(RUNTIME_STAMP)

dev: $(DEV_STAMP)

serve: $(RUNTIME_STAMP)
	$(BIN)/fastmode serve

# the programs the suites run that pip cannot install (redis-server, Chromium and its driver;
# docker-compose for test-integration), from Debian's packages when missing
# (PROGRAM:PACKAGE; apt-get install PACKAGE when PROGRAM is not on the PATH)
TEST_PROGRAMS := redis-server:redis-server chromium:chromium chromedriver:chromium-driver \
  node:nodejs npm:npm unshare:util-linux ip:iproute2
INTEGRATION_PROGRAMS := redis-server:redis-server docker-compose:?docker-compose
system-deps:
	bash scripts/system_deps.sh $(TEST_PROGRAMS)

# the coding-agent CLIs the agent tests and benchmarks run (Claude Code, Codex CLI, opencode,
# pi), pinned in tests/agents/package.json (and their dependencies in its package-lock.json;
# `npm ci` refuses a lock without the other platforms' optional binaries); Claude Code's and
# opencode's install scripts link their platform binary (npm 11 runs no other package's)
AGENTS_STAMP := tests/agents/node_modules/.package-lock.json
$(AGENTS_STAMP): tests/agents/package.json tests/agents/package-lock.json | system-deps
	npm install --prefix tests/agents --no-audit --no-fund --loglevel=error
agents: $(AGENTS_STAMP)

# the drift check: the CLIs' newest releases, in a folder of their own, through the same tests
# (what a new release breaks shows up before a user meets it)
agents-latest: system-deps
	mkdir -p .agents-latest
	cd .agents-latest && npm install --no-audit --no-fund --loglevel=error \
	  @anthropic-ai/claude-code@latest @openai/codex@latest opencode-ai@latest \
	  @mariozechner/pi-coding-agent@latest
test-agents-latest: $(DEV_STAMP) agents-latest
	FASTMODE_AGENTS_BIN=$(CURDIR)/.agents-latest/node_modules/.bin \
	  $(BIN)/pytest -q tests/clients/test_coding_agents.py

lint: $(DEV_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# three workers (many tests wait on servers), a test file each at a time, the longest files first
# (tests/conftest.py SLOWEST_FILES)
test: $(DEV_STAMP) system-deps $(AGENTS_STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=15

# The docker-compose topology without Docker: docker-compose.yml's services as local processes
# on free loopback ports, the integration suite against them (scripts/integration.py), after a
# check that every command the compose file runs exists (docker-compose config -q if installed).
test-integration: $(DEV_STAMP)
	bash scripts/system_deps.sh $(INTEGRATION_PROGRAMS)
	$(BIN)/python scripts/check_compose.py
	$(BIN)/python scripts/integration.py

bench: $(DEV_STAMP) $(AGENTS_STAMP)
	mkdir -p bench-results
	$(BIN)/python bench/sim_hour.py | tee bench-results/sim_hour.txt
	@for b in agent_sessions agent_turns pacing scrape_stall fast_share gateway_overhead loadgen_ceiling mixed_run ws_session remote_hop workers redis_state calibration prefix_cache vllm_bench_serve structured; do \
	  if [ -f bench/$$b.py ]; then $(BIN)/python bench/$$b.py | tee bench-results/$$b.txt; fi; \
	done
	$(BIN)/python bench/soak.py --minutes $(SOAK_MINUTES) --json bench-results/soak.json \
	  | tee bench-results/soak.txt

# constraints.txt anew from a fresh resolve of `.[dev]` (after a change of dependencies in
# pyproject.toml): the newest pip resolves it, every installed version pinned
lock:
	rm -rf .venv-lock
	$(PY) -m venv .venv-lock
	.venv-lock/bin/python -m pip install -q --upgrade pip
	.venv-lock/bin/python -m pip install -q -e '.[dev]'
	{ echo "# Every package of \`pip install -e '.[dev]'\`, pinned (made by \`make lock\`): the Makefile"; \
	  echo "# installs with -c constraints.txt, so pip resolves at once. Regenerate after changing"; \
	  echo "# the dependencies in pyproject.toml."; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable; } > constraints.txt
	rm -rf .venv-lock

clean:
	rm -rf $(VENV) bench-results .pytest_cache .ruff_cache
