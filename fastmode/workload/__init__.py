"""What a load test sends, defined once: tier mix, length distributions, arrival processes.

Pure and standard-library only, so that both the simulator (``backends.simulate``) and the
client-side load generator (``clients.workload``) import it without importing each other: the
bench's ``--compare-sim`` relies on the two drawing the same requests in the same order from
one seed, and that only holds for certain if there is one definition to draw from.
"""

from .arrivals import ARRIVAL_KINDS, check_arrivals, open_loop_times, user_rng
from .errors import WorkloadError
from .lengths import DIST_KINDS, LOGNORMAL_SIGMA, DistKind, LengthDist
from .mix import TierPicker, normalise_mix, parse_mix
from .sampler import RequestShape, ShapeSampler

__all__ = [
    "ARRIVAL_KINDS",
    "DIST_KINDS",
    "LOGNORMAL_SIGMA",
    "DistKind",
    "LengthDist",
    "RequestShape",
    "ShapeSampler",
    "TierPicker",
    "WorkloadError",
    "check_arrivals",
    "normalise_mix",
    "open_loop_times",
    "parse_mix",
    "user_rng",
]
