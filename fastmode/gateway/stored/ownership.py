"""Who owns what is stored, and who may see it (the tenancy model, docs/tenants.md).

With ``[auth]`` on, everything the gateway keeps for a client — a stored response, its input
items, the conversation a ``previous_response_id`` continues, a websocket connection's recent
responses — belongs to the API key that made it. The owner is kept with the object as the key's
*id* (``key_id``: a hash, never the key itself), and every read goes through a ``Caller``:

* its owner sees it; another key gets what an unknown id gets (404, or
  ``previous_response_not_found``), so a key cannot even learn that an id exists;
* a request without a valid key is refused (401) before anything is looked up;
* the admin key (``[admin]``) reads and deletes everyone's objects (it cannot run turns, so it
  never continues one);
* with auth off, objects belong to nobody and everyone (``EVERYONE``), as a single-user mock.

The same key id replaces the raw key wherever state is persisted (ledger rows, usage totals,
rate-limit bucket names), so neither a copy of the SQLite file nor of the Redis database holds
a key: ``key_id`` is the first 128 bits of SHA-256, in hex. That is a one-way name for a secret
with the entropy of an API key; a short, guessable key is as guessable from its id as by trying
it on the API, so keys should be long and random (as providers' are).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fastmode.gateway.values.auth import Authenticator, Principal
from fastmode.gateway.values.key_ids import KEY_ID_HEX, KEY_ID_PREFIX, is_key_id, key_id

__all__ = ["EVERYONE", "KEY_ID_HEX", "KEY_ID_PREFIX", "NOBODY", "Caller", "caller", "deferred",
           "is_key_id", "key_id"]

@dataclass(frozen=True)
class Caller:
    """Whose objects a request may see, and whose it stores."""

    owner: str | None  # the key id stored objects get (None: no owner)
    sees_all: bool = False  # auth off, or the admin key

    def may_see(self, owner: str | None) -> bool:
        return self.sees_all or (self.owner is not None and owner == self.owner)

    @classmethod
    def of(cls, principal: Principal | None) -> Caller:
        """The caller of an authenticated request (``None``: auth is off)."""
        return EVERYONE if principal is None else cls(principal.id)


EVERYONE = Caller(None, sees_all=True)  # auth off: nobody owns anything, everyone sees it
NOBODY = Caller(None)  # sees nothing, stores unowned: the default of an unscoped store
ADMIN = Caller(None, sees_all=True)


def caller(auth: Authenticator, headers: Mapping[str, str],
           admin: bool = False) -> Caller:
    """The caller of a request from its ``Authorization``: 401 (the authenticator's error,
    counted in its metric) without a valid key; ``admin``: the request carries the admin key."""
    if admin:
        return ADMIN
    return Caller.of(auth.authenticate(headers.get("authorization")))


def deferred(auth: Authenticator, headers: Mapping[str, str]) -> Callable[[], Caller]:
    """``caller`` when first needed: a turn's request is authenticated by the pipeline (which
    writes its 401 to the ledger); its store needs the caller only to continue or to keep a
    response, by which time the key is known to be good (or a continuation 401s first)."""
    return lambda: caller(auth, headers)
