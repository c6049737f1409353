"""Remote tiers: the gateway in front of engine services (or any OpenAI-compatible server).

``pool`` picks an upstream and tracks health, ``proxy`` runs a request against the pool with
retries, ``rewrite`` reads and rewrites the upstream's answer, ``http`` is the keep-alive client.
"""

from .pool import Upstream, UpstreamPool
from .proxy import RemoteTiers
from .rewrite import Call, Tap, upstream_error

__all__ = ["Call", "RemoteTiers", "Tap", "Upstream", "UpstreamPool", "upstream_error"]
