"""The real-time replica and its driver as the supervisor sees them: ``LiveReplica``, the base
of ``realtime.RealtimeReplica``, and ``LiveDriver``, what ``realtime.RealtimeDriver`` offers.

``realtime.py`` builds the ``Supervisor`` and hands it its replicas' failures; the supervisor
types against these declarations instead of importing ``realtime.py`` back (an import circle:
neither module could be read or tested apart from the other).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seq
from typing import Protocol

from fastmode.backends.drivers.base import Replica
from fastmode.backends.drivers.token_stream import TokenStream
from fastmode.backends.prefix_cache import CacheRouting
from fastmode.backends.scheduler import Sequence


class LiveReplica(Replica):
    """A replica stepped by its own task on the event loop (``realtime.RealtimeReplica``):
    the attributes and calls its token streams and its supervisor use."""

    __slots__ = ()

    loop: asyncio.AbstractEventLoop
    clock: Callable[[], float]  # modeled seconds
    scale: float  # wall seconds per modeled second
    late: float  # how far behind its modeled timeline the last step was served
    done_index: int  # the last step whose tokens exist ...
    done_end: float  # ... and its modeled end
    slipped: float  # seconds the timeline slipped in all
    stopped: bool
    listening: dict[int, list[TokenStream]]  # step index -> the listening streams it calls

    @property
    def alive(self) -> bool:
        """Its loop task is alive."""
        raise NotImplementedError

    def wait_for(self, index: int, fut: asyncio.Future[None] | TokenStream) -> None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def halt(self) -> None:
        raise NotImplementedError

    def release_readers(self) -> None:
        raise NotImplementedError

    def wake(self) -> None:
        raise NotImplementedError

    def cancel(self, seq: Sequence) -> None:
        raise NotImplementedError


class LiveDriver(Protocol):
    """What the supervisor reads of the driver whose replicas it watches."""

    @property
    def now(self) -> float: ...

    @property
    def replicas(self) -> Seq[LiveReplica]: ...

    @property
    def by_deployment(self) -> Mapping[str, Seq[LiveReplica]]: ...

    @property
    def routing(self) -> Mapping[str, CacheRouting]: ...


__all__ = ["LiveDriver", "LiveReplica"]
