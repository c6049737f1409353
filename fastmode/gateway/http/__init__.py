"""HTTP pieces every floor may use: JSON bodies parsed and bounded (``json_body``,
``limits``), work off the event loop for large ones (``offload``), JSON responses and list
pages, and the modeled network between a client and the gateway (``netem``). They know no
request's meaning: they import the gateway's basics only."""
