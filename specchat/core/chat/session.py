"""The names conversations were driven by before the runtime had its own package; they are the runtime's now.

``ChatEngine`` is :class:`specchat.core.runtime.runtime.Runtime` (the loaded pair) and ``ChatSession``
is :class:`specchat.core.runtime.conversation.Conversation`.
"""

from __future__ import annotations

from specchat.core.runtime.build import model_memory
from specchat.core.runtime.conversation import PROMPT_STEP, PromptProgress
from specchat.core.runtime.conversation import Conversation as ChatSession
from specchat.core.runtime.runtime import LoadProgress
from specchat.core.runtime.runtime import Runtime as ChatEngine

__all__ = ["PROMPT_STEP", "ChatEngine", "ChatSession", "LoadProgress", "PromptProgress", "model_memory"]
