"""The benchmarks: one program per file, run as ``python bench/NAME.py`` (or
``python -m bench.NAME``), each printing what it measured.

A package, installed with the project (``pip install -e .``), so that a benchmark, a script
under ``scripts/`` and the tests import the shared helpers (``bench.harness``,
``bench.stream_client``) by one name, and the project's packages by their public modules,
with no ``sys.path`` edits. What they may import is a rule of docs/architecture.md, checked by
tests/test_architecture.py.
"""
