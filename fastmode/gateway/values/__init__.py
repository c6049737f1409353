"""The values a request is resolved into, read by every later step: the request as its protocol
translated it (``request``), who asked (``auth``: the key and its principal), the role and the
decision (``roles``, ``decision``: role, tier, price era, the fault drawn), the prompt-cache
breakpoints (``caching``), the fault asked for (``fault_spec``), the admitted job and its token
source (``job``, ``token_source``) and ids. Plain data and their rules: they import the
gateway's basics (errors, money, config) and ``state`` only."""
