"""The admission interface and the in-process engines behind it: what a tier's backend is
asked (``tickets``: a ``Ticket`` in, a ``Job`` or ``Refused`` out) and the local engine's
answer (``engine_admission``) with its constraints: the overflow policy, LoRA adapters' slots,
KV transfer between prefill and decode engines, data-parallel ranks and the prefix's block
keys. The remote tiers (``gateway.remote``) are the other backend."""
