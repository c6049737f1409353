"""fastmode: a mock LLM serving gateway with fast-mode tiers."""
