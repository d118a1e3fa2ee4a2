"""``specchat serve``: an OpenAI-compatible HTTP server on the loaded pair, speculative by default.

``protocol`` reads requests, ``tool_calls`` reads tool calls out of replies, ``replies`` folds engine
events into OpenAI-shaped bodies and chunks, ``request_queue`` runs one request at a time on the
runtime's thread behind a bounded FIFO queue, and ``app`` is the Starlette application with its limits.
"""
