"""Two clocks for one scheduler: real time (asyncio, for serving) and virtual time (simulation).

Both drive the same ``Scheduler`` objects the same way (``base.py``) — a replica plans a step at
the time its previous step ended (or when work arrives at an idle replica) — so for the same
arrivals they produce the same timeline. Only the way time passes differs: the real-time driver
(``realtime.py``) sleeps until a step's modeled end, once per replica step; the virtual driver
(``virtual.py``) jumps from event to event. Real-time replicas are supervised
(``supervisor.py``): one whose task fails or that stops stepping is reported and restarted.
"""

from fastmode.backends.drivers.base import (
    OVERLOADED,
    TOO_LARGE,
    Driver,
    Overloaded,
    Replica,
    TooLarge,
    new_sequence,
    pick_replica,
)
from fastmode.backends.drivers.realtime import PACING_TOLERANCE_S, RealtimeDriver, RealtimeReplica
from fastmode.backends.drivers.realtime_fleet import PoolHandle, RealtimeFleet
from fastmode.backends.drivers.supervisor import ReplicaFailure, Supervisor
from fastmode.backends.drivers.token_stream import TokenStream
from fastmode.backends.drivers.virtual import Arrival, VirtualDriver

__all__ = [
    "OVERLOADED",
    "PACING_TOLERANCE_S",
    "TOO_LARGE",
    "Arrival",
    "Driver",
    "Overloaded",
    "PoolHandle",
    "RealtimeDriver",
    "RealtimeFleet",
    "RealtimeReplica",
    "Replica",
    "ReplicaFailure",
    "Supervisor",
    "TokenStream",
    "TooLarge",
    "VirtualDriver",
    "new_sequence",
    "pick_replica",
]
