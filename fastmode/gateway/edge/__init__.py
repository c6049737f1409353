"""The edge: connections and their bounds (body, head, connection caps), the streaming response
writer, health probes (replica health, LoRA and vLLM gauges), the watchdog and shutdown. It
turns bytes into a turn for the pipeline and the pipeline's events back into bytes; everything
below it knows nothing of HTTP connections. ``gateway.app`` assembles the app on top."""
