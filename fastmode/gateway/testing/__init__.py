"""Per-test state for the pytest plugin (``fastmode.pytest_plugin``), keyed by test id.

A request that carries ``x-fastmode-test-id: ID`` sees that test's scripted replies and counted
faults, and is written to that test's journal. The state is in the serving process (the
plugin runs one server per xdist worker); the admin API sets and reads it
(``gateway.endpoints.testing_api``), the pipeline's per-test front applies it
(``gateway.pipeline.per_test``). Imports ``values`` only."""

from fastmode.gateway.testing.scopes import CountedFault, ReplyRule, TestScope, TestScopes

__all__ = ["CountedFault", "ReplyRule", "TestScope", "TestScopes"]
