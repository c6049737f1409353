"""Endpoints on top of the pipeline: the stored-object APIs (responses, chat completions,
conversations), models, traces, embeddings, token counting, render, LoRA adapters, background
responses, the per-test API and the admin API."""
