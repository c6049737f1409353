"""Remote tiers: the gateway in front of engine services (or any OpenAI-compatible server).

``pool`` picks an upstream and tracks health, ``proxy`` admits a turn on an upstream with
retries, ``translate`` maps every protocol to the upstream's Chat Completions and its answer back
to a reply, ``stream`` makes that answer a ``Job``, ``rewrite`` maps upstream errors, ``http`` is
the keep-alive client.
"""

from fastmode.gateway.remote.pool import Upstream, UpstreamPool
from fastmode.gateway.remote.proxy import RemoteTiers
from fastmode.gateway.remote.rewrite import upstream_error
from fastmode.gateway.remote.stream import RemoteJob, UpstreamStream
from fastmode.gateway.remote.translate import ChunkReader, LiveReply, upstream_payload

__all__ = ["ChunkReader", "LiveReply", "RemoteJob", "RemoteTiers", "Upstream", "UpstreamPool",
           "UpstreamStream", "upstream_error", "upstream_payload"]
