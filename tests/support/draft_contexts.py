"""Draft contexts for tests of the drafters without a model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class SureContext:
    """A dense draft context with a 4-token vocabulary that always drafts token 1."""

    restored = False
    tried_decodes = 0

    def __init__(self, n_ctx: int = 256) -> None:
        self.n_ctx = n_ctx
        self.tokens: list[int] = []

    def extend_to(self, tokens: Sequence[int]) -> int:
        self.tokens = list(tokens)
        return 0

    def sync(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        self.tokens = list(tokens)
        return np.array([0.0, 3.0, 1.0, 0.5], dtype=np.float32), len(tokens) - 1

    def decode(self, tokens: Sequence[int]) -> np.ndarray:
        self.tokens.extend(tokens)
        return np.array([[0.0, 3.0, 1.0, 0.5]], dtype=np.float32)

    def checkpoint(self, slot: str) -> None:
        pass
