"""The turn pipeline: one admission path for every protocol and tier. A request is resolved once
into a decision (role, tier, price, fault), admitted to an engine or a remote tier, streamed as a
turn and settled (usage billed once). Protocols, the edge and the websocket call into it."""
