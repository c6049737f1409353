"""Two clocks for one scheduler: real time (asyncio, for serving) and virtual time (simulation).

Both drive the same ``Scheduler`` objects the same way (``base.py``) — a replica plans a step at
the time its previous step ended (or when work arrives at an idle replica) — so for the same
arrivals they produce the same timeline. Only the way time passes differs: the real-time driver
(``realtime.py``) sleeps until a step's modeled end, once per replica step; the virtual driver
(``virtual.py``) jumps from event to event.
"""

from .base import (
    OVERLOADED,
    TOO_LARGE,
    Driver,
    Overloaded,
    Replica,
    TooLarge,
    new_sequence,
    pick_replica,
)
from .realtime import RealtimeDeployment, RealtimeDriver, RealtimeReplica
from .realtime_fleet import PoolHandle, RealtimeFleet
from .token_stream import TokenStream
from .virtual import Arrival, VirtualDriver

__all__ = [
    "OVERLOADED",
    "TOO_LARGE",
    "Arrival",
    "Driver",
    "Overloaded",
    "PoolHandle",
    "RealtimeDeployment",
    "RealtimeDriver",
    "RealtimeFleet",
    "RealtimeReplica",
    "Replica",
    "TokenStream",
    "TooLarge",
    "VirtualDriver",
    "new_sequence",
    "pick_replica",
]
