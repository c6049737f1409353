"""Endpoints on top of the pipeline: the stored-object APIs (responses, chat completions,
conversations), models, traces, embeddings, background responses and the admin API."""
