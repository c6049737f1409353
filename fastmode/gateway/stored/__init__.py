"""What is stored: the usage ledger, stored responses (and what they keep) and chat completions,
and who owns what. Every stored object belongs to the API key that made it. Imports ``values``,
``http`` and ``state``."""
