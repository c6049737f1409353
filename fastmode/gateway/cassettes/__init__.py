"""Record and replay (docs/replay.md): exchanges recorded as cassettes, served back.

``hooks`` is where the turn pipeline calls in; ``recorder`` writes cassettes; ``library``
loads them and matches requests (``matching``); ``replay`` is the replay backend of every tier
(``replay_stream`` and ``encoder`` give back the recorded events, ``reply`` the recorded content
to an engine); ``format``, ``transcript`` and ``streams`` define and read the cassette format;
``check`` is ``fastmode replay-check``. Nothing is imported here: ``gateway.config`` includes
``config``, the tables of ``[record]`` and ``[replay]``.
"""
