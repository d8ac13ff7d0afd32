"""The fake embeddings model: deterministic hashed vectors where texts sharing words, or parts
of words, are near. Each word adds a signed unit at a hashed position, and each of its
character trigrams a smaller one, so "reimburse" and "reimbursement" or "vacation" and
"vacations" come close, as they do in a learned model, while a full-text index (which stems
only regular endings) may not match them. Deterministic: the same text, the same vector."""

from __future__ import annotations

import hashlib
import math
import re

DIMENSIONS = 384
_WORD = re.compile(r"\w+")
# Words that carry no meaning of their own weigh little, as they do in a trained model.
_STOP = frozenset("a an the of to in on for and or is are was were be by at as it its this that with from what "
                  "which who how when where do does did i you we they he she our your their".split())


def _slot(token: str) -> tuple[int, float]:
    digest = hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest[:4], "big") % DIMENSIONS, 1.0 if digest[4] & 1 else -1.0


def embed(text: str) -> list[float]:
    vector = [0.0] * DIMENSIONS
    for word in _WORD.findall(text.lower()):
        weight = 0.1 if word in _STOP else 1.0
        index, sign = _slot(f"w:{word}")
        vector[index] += sign * weight
        padded = f"<{word}>"
        for i in range(len(padded) - 2):
            index, sign = _slot(f"t:{padded[i:i + 3]}")
            vector[index] += sign * weight * 0.35
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]
