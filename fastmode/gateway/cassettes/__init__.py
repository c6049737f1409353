"""Record and replay (docs/replay.md): exchanges recorded as cassettes, served back.

``hooks`` is where the turn pipeline calls in; ``recorder`` writes cassettes; ``library``
loads them and matches requests (``matching``); ``replay`` is the replay backend of every tier
(``replay_stream`` and ``encoder`` give back the recorded events, ``reply`` the recorded content
to an engine); ``scoped`` is one test's cassette (``fastmode.cassette``); ``transcript`` and
``streams`` read the cassette format (``gateway.observe.exchange_format``); ``check`` is
``fastmode replay-check``. The tables of ``[record]`` and ``[replay]`` are
``gateway.cassette_config``, which the config includes.
"""
