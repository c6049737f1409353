"""fastmode: a mock LLM serving gateway with fast-mode tiers, as a test double.

The public Python API is what this module exports; everything else (``gateway``,
``backends``, ``clients``, ``workload``, ``fastmode.cli``) is internal.

* ``fastmode.serve(config=None, time_scale=1.0, port=0)`` — a gateway for a ``with`` or
  ``async with`` block: ``server.url``, ``server.openai()``, ``server.anthropic()``.
* the pytest plugin (``fastmode.pytest_plugin``, on once fastmode is installed): the
  ``fastmode`` fixture.
"""

from .server import Server, serve

__all__ = ["Server", "serve"]
