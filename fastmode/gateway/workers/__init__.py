"""``fastmode serve --workers N``: one port, N processes, each replica in exactly one of them.

``partition`` splits the deployments' replicas over the workers, ``supervisor`` runs them on a
shared SO_REUSEPORT port, ``aggregate`` merges their ``/metrics``, ``server`` holds the uvicorn
settings every gateway process uses.
"""

from fastmode.gateway.workers.partition import WorkersError, local_deployments, partition
from fastmode.gateway.workers.supervisor import Supervisor, describe

__all__ = ["Supervisor", "WorkersError", "describe", "local_deployments", "partition"]
