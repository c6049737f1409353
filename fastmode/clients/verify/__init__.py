"""``fastmode verify``: a load generator's results checked against the server's ground truth.

``truth`` reads the server's traces (``GET /v1/fastmode/traces``, or the ``--trace-file``) and
derives per request what a tool should have measured; ``tools`` recognises which tool wrote a
file or folder and reads it (``aiperf``, ``guidellm``, ``inference_perf``, ``simple``) into one
shape (``records``); ``overhead`` splits each request's client time from the server's;
``compare`` puts the two side by side, metric by metric, and says where a tool is off, by how
much, and why when the traces can tell. Public API only: files and HTTP.
"""
