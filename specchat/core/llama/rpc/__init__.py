"""llama.cpp's RPC backend, all of it: remote devices for the target, from a child process that may die.

- :mod:`.binding`: ``ggml-rpc`` through ctypes (adding servers, serving this machine's devices);
- :mod:`.target`: :class:`~.target.RemoteTarget`, the target's context in a child process, and server probes;
- :mod:`.worker`: that child process (``python -m specchat.core.llama.rpc.worker``);
- :mod:`.pipe`: the wire format between the two.

Front ends reach it only through :mod:`specchat.core.remote` (server lists, probes, serving) and the
runtime (:mod:`specchat.core.runtime`, loading a target on remote devices).
"""
