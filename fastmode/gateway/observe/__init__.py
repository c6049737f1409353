"""What is observed: Prometheus metrics (fastmode's and vLLM's names), per-tier gauges, traces
and their bodies (in the exchange format cassettes share, ``exchange_format``), KV events and
host lag. Read by the pipeline and the edge; imports ``values``, ``http`` and ``stored`` only."""
