"""What is stored: the usage ledger, stored responses and chat completions, ids and who owns
what. Every stored object belongs to the API key that made it."""
