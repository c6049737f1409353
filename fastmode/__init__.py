"""fastmode: a mock LLM serving gateway with fast-mode tiers, as a test double.

The public Python API is what this module exports; everything under it
(``fastmode.gateway``, ``fastmode.backends``, ``fastmode.clients``, ``fastmode.workload``,
``fastmode.cli``) is internal.

* ``fastmode.serve(config=None, time_scale=1.0, port=0)`` — a gateway for a ``with`` or
  ``async with`` block: ``server.url``, ``server.openai()``, ``server.anthropic()``.
* the pytest plugin (``fastmode.pytest_plugin``, on once fastmode is installed): the
  ``fastmode`` fixture.

The exports load on first use, so that importing the simulation core
(``fastmode.backends``) does not start the HTTP edge's imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastmode.server import Server, serve

__all__ = ["Server", "serve"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from fastmode import server

        return getattr(server, name)
    raise AttributeError(f"module 'fastmode' has no attribute {name!r}")
