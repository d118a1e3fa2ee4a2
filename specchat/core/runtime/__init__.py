"""The runtime: the loaded pair that every front end (window, terminal, server) drives. No Qt, no HTTP.

- :mod:`.runtime`: :class:`~.runtime.Runtime`, the loaded target (local or on remote devices) with what drafts
  for it, its placement and the drafters it can run; ``reply(messages, params, ...)`` -> engine events;
- :mod:`.conversation`: :class:`~.conversation.Conversation`, one conversation kept between turns;
- :mod:`.remote`: the RPC backend for front ends (build check, server probes, serving devices);
- :mod:`.build`: the llama.cpp build's facts and a model file's kind.

The package's own ``__init__`` imports nothing, so importing :mod:`.remote` loads no llama.cpp.
"""
