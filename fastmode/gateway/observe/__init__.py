"""What is observed: Prometheus metrics (fastmode's and vLLM's names), per-tier gauges, traces,
host lag and replica health. Read by the pipeline and the edge; imports neither."""
