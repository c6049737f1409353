"""What a load test sends, defined once: tier mix, length distributions, arrival processes.

Pure and standard-library only, so that both the simulator (``backends.simulate``) and the
client-side load generator (``clients.workload``) import it without importing each other: the
bench's ``--compare-sim`` relies on the two drawing the same requests in the same order from
one seed, and that only holds for certain if there is one definition to draw from.
"""

from fastmode.workload.arrivals import ARRIVAL_KINDS, check_arrivals, open_loop_times, user_rng
from fastmode.workload.errors import WorkloadError
from fastmode.workload.lengths import DIST_KINDS, LOGNORMAL_SIGMA, DistKind, LengthDist
from fastmode.workload.mix import TierPicker, normalise_mix, parse_mix
from fastmode.workload.sampler import RequestShape, ShapeSampler

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
