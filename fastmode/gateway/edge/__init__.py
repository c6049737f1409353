"""The edge: the HTTP app, its connections and their bounds (body, head, connection caps),
the streaming response writer and shutdown. It turns bytes into a turn for the pipeline and the
pipeline's events back into bytes; everything below it knows nothing of HTTP connections."""
