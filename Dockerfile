# fastmode image: the gateway (`fastmode serve`) and the engines (`fastmode engine`) run from the
# same `runtime` image; `test` adds the integration suite and its client libraries on top.
# Used by docker-compose.yml; see docs/compose.md.

# -- build: a wheel of the project (sources never reach the runtime image) ---------------------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md* ./
COPY fastmode ./fastmode
RUN pip wheel --no-deps --wheel-dir /wheels .

# -- runtime: the installed package, its dependencies and a non-root user ----------------------
FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /wheels /wheels
RUN pip install /wheels/*.whl \
    && rm -rf /wheels \
    && useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin fastmode
USER fastmode
WORKDIR /home/fastmode
EXPOSE 8000
# The config is mounted from a file (docker-compose.yml); without one the built-in default runs.
CMD ["fastmode", "serve", "--host", "0.0.0.0", "--port", "8000"]

# -- test: the integration suite, run against the gateway by the integration-tests service -----
FROM runtime AS test
USER root
RUN pip install "pytest>=8" "pytest-asyncio>=0.23" "openai>=2.22" "anthropic>=0.80"
WORKDIR /app
COPY pyproject.toml ./
COPY tests/conftest.py ./tests/conftest.py
# conftest.py takes its port reservation from the benchmarks' harness (bench.harness.free_port)
COPY bench/__init__.py bench/harness.py ./bench/
COPY tests/integration ./tests/integration
USER fastmode
CMD ["pytest", "-q", "-p", "no:cacheprovider", "tests/integration"]
