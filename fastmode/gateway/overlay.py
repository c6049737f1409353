"""A user's config file laid over the built-in default (``fastmode/gateway/data/default.toml``).

A config file says what differs from the default, not everything: a three-line file
(``[server]`` / ``port = 9000``) is a whole config. Tables merge key by key, recursively; any
other value (a number, a string, an array such as ``[[auth.keys]]`` or ``[[scripts]]``)
replaces the default's.

The serving topology is one unit: ``deployments``, ``tiers``, ``routes``,
``route_patterns``, ``fleet``, ``behavior`` and ``pricing`` refer to each other (a tier names
its deployment, a route its tiers, a pattern its route, the fleet holds the deployments'
replicas, a behavior names a served model). A file that defines ``[deployments]`` brings its
own topology, so those seven tables come from the file
alone: the default's pools, tiers, routes (and aliases), fleet and behaviors are not inherited,
and a complete config means what it meant before overlays existed. A file without
``[deployments]`` builds on the default's topology: a ``[routes.my-id]`` or a
``[tiers.standard.quality]`` is added to it.

Two top-level keys, removed before validation, change that:

* ``replace = ["routes", "tiers.spark.quality"]``: these tables (dotted paths) come from the
  file alone; one listed but absent from the file is dropped (replacing ``routes`` replaces
  ``route_patterns`` too). ``replace = true``: the whole
  file stands alone, the default is not read.
* ``merge = ["routes", ...]``: topology tables merged with the default's even though the file
  defines ``[deployments]`` (e.g. to add one pool to the default's).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

TOPOLOGY = ("deployments", "tiers", "routes", "route_patterns", "fleet", "behavior", "pricing")
META = ("replace", "merge")


def overlay(base: dict[str, Any], user: dict[str, Any],
            known: Collection[str]) -> dict[str, Any]:
    """``user`` laid over ``base`` (both parsed TOML; neither is changed). ``known`` are the
    config's top-level tables, which ``replace`` and ``merge`` may name. ValueError names
    the offending key."""
    user = dict(user)
    replace = user.pop("replace", [])
    merge = user.pop("merge", [])
    if replace is True:
        return user
    replaced = set(_paths("replace", replace, known))
    merged = set(_paths("merge", merge, TOPOLOGY))
    if "deployments" in user:
        replaced |= set(TOPOLOGY) - merged
    if "routes" in replaced:
        replaced.add("route_patterns")  # the default's patterns name the default's routes
    return _merge(base, user, replaced, "")


def _paths(key: str, value: Any, allowed: Collection[str]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{key}: a list of table names (e.g. [\"routes\"])"
                         + (" or true" if key == "replace" else "") + f", not {value!r}")
    for path in value:
        if path.split(".")[0] not in allowed:
            raise ValueError(f"{key}: unknown table {path!r}; allowed: "
                             f"{', '.join(sorted(allowed))}")
    return value


def _merge(base: dict[str, Any], user: dict[str, Any], replaced: set[str],
           prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in base.items():
        path = prefix + key
        if path in replaced:
            continue  # from the file alone: the base's is never inherited
        if isinstance(value, dict) and any(r.startswith(path + ".") for r in replaced):
            value = _merge(value, {}, replaced, path + ".")  # a table inside it is replaced
        out[key] = value
    for key, value in user.items():
        path = prefix + key
        current = out.get(key)
        if path not in replaced and isinstance(value, dict) and isinstance(current, dict):
            out[key] = _merge(current, value, replaced, path + ".")
        else:
            out[key] = value
    return out
