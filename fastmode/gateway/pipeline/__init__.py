"""The turn pipeline: one admission path for every protocol and tier. A request is resolved once
into a decision (``decision``: role, tier, price, fault), admitted to an engine or a remote tier
(``admission``: the ``Gateway``, with rate limits, routing and the per-test front), streamed as a
turn (``turn``) and settled (``settlement``: usage billed once). Below it: the values, the
protocols, the backends (``engines``, ``remote``) and the faults, cassettes and test state it
applies; above it, the endpoints and the edge that call into it."""
