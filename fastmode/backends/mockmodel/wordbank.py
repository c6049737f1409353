"""The mock model's vocabulary: what serving-systems prose is made of.

Data only. The writer (``prose.py``) picks from these with the request's own random stream, so
the order and contents of every tuple are part of the output: changing them changes every
seeded reply.
"""

SUBJECTS = (
    "the scheduler", "the gateway", "each worker", "the router", "the KV cache",
    "a decode step", "the prefill phase", "the tokenizer", "the load balancer", "the batch",
    "the runtime", "the event loop", "a replica", "the control plane", "the request queue",
    "the model server", "the draft model", "the speculative decoder", "the cache manager",
    "the rate limiter", "the admission controller", "the autoscaler", "the attention kernel",
    "the memory allocator", "the streaming layer", "the client library", "the retry policy",
    "the health check", "the profiler", "each shard", "the pipeline", "the compiler",
    "the benchmark harness", "the metrics exporter", "the config loader",
    "the connection pool", "the planner", "the fast tier", "the standard tier", "the proxy",
)  # fmt: skip
VERBS = (
    "admit", "evict", "batch", "stream", "schedule", "retry", "buffer", "split", "merge",
    "route", "cache", "throttle", "prefetch", "flush", "serialize", "validate", "measure",
    "reuse", "preempt", "drain", "shard", "compress", "track", "replay", "pin", "release",
    "reserve", "forward", "rebalance", "coalesce", "sample", "verify", "restart", "log",
    "expose", "bound", "estimate", "amortize", "overlap", "reorder", "prioritize", "account for",
)  # fmt: skip
OBJECTS = (
    "the request", "a new prefill", "the pending tokens", "the next chunk", "idle slots",
    "the prompt prefix", "stale entries", "the longest sequence", "each token",
    "the draft tokens", "the partial response", "the attention state", "the output stream",
    "the usage record", "the rate-limit window", "the cold replica", "the hot path",
    "the tail latency", "the first token", "the remaining budget", "the key-value blocks",
    "the tool call", "the JSON arguments", "the error rate", "queued work", "the socket",
    "the heartbeat", "the trace", "the checkpoint", "the shared prefix", "the weights",
    "the activations", "the batch size", "the step time", "the page table", "the retry budget",
)  # fmt: skip
ADVERBIALS = (
    "at the next step", "once a slot is free", "under heavy load",
    "without blocking the event loop", "before the deadline", "in small chunks",
    "on every decode step", "when the queue is long", "after the prefill completes",
    "in the background", "as soon as possible", "for each tenant", "across all replicas",
    "within the token budget", "behind a feature flag", "on the fast tier",
    "at a fixed cadence", "when memory runs low", "per connection", "in the same step",
    "before it reaches the client", "only when asked", "with a short timeout",
    "in constant time", "during warm-up", "on a cache hit", "on a cache miss",
    "between two steps", "for long prompts", "at the end of the stream",
)  # fmt: skip
OPENERS = (
    "In practice,", "However,", "As a result,", "For example,", "Meanwhile,", "In short,",
    "By default,", "Under the hood,", "In most deployments,", "To keep latency low,",
    "At high concurrency,", "Put simply,", "On the other hand,", "Because of this,",
    "In our tests,", "Even so,", "Crucially,", "In the common case,",
)  # fmt: skip
REASONS = (
    "because memory bandwidth, not compute, bounds the decode phase",
    "so that no request waits behind a long prompt", "which keeps the accelerator busy",
    "since the prefix is already cached", "to avoid a thundering herd",
    "which roughly halves the time to first token", "so the client sees steady progress",
    "because each step reads every weight once", "which trades throughput for latency",
    "so that retries stay idempotent", "which is cheap compared with a full recompute",
    "because the queue would otherwise grow without bound",
)  # fmt: skip
ADJECTIVES = (
    "fast", "slow", "stable", "predictable", "expensive", "cheap", "bounded", "noisy", "idle",
    "saturated", "warm", "cold", "stale", "small", "large", "busy", "lightly loaded",
)  # fmt: skip
TOPICS = (
    "latency", "throughput", "batching", "scheduling", "streaming", "caching", "tokenization",
    "sampling", "backpressure", "quantization", "sharding", "prefill", "decoding", "fairness",
    "observability", "speculation", "admission control", "memory pressure", "tail latency",
)  # fmt: skip
GREETINGS = (
    "Sure.", "Good question.", "Here is an overview.", "Short answer: it depends on the load.",
    "Let me walk through it.", "Here is how it works.",
)  # fmt: skip
LIST_INTROS = (
    "Key points:", "The main steps are:", "In order:", "What to check:", "A quick summary:",
    "The moving parts:",
)  # fmt: skip
FUNC_NAMES = ("handle", "admit_next", "step", "drain_queue", "stream_tokens", "plan_batch")
VAR_NAMES = ("scheduler", "pool", "router", "engine", "queue", "cache")
CODE_BLOCKS = (
    "```python\nasync def {fn}(request):\n    slot = await {var}.admit(request)\n"
    "    async for token in slot.stream():\n        yield token\n```",
    "```python\ndef {fn}(tokens: list[str], budget: int = {n}) -> list[str]:\n"
    "    # keep the newest tokens within the budget\n    return tokens[-budget:]\n```",
    '```json\n{{"model": "demo", "max_tokens": {n}, "stream": true, "seed": {m}}}\n```',
    "```bash\ncurl -s localhost:8000/v1/models | jq '.data[].id'\n```",
    "```python\nfor step in range({n}):\n    batch = {var}.next_batch(max_size={m})\n"
    "    if not batch:\n        break\n    {fn}(batch)\n```",
    "```yaml\n{var}:\n  max_batch: {m}\n  timeout_ms: {n}\n```",
)
