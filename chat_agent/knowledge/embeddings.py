"""Dense vectors from an OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, a
LiteLLM proxy): configured by `CHAT_AGENT_EMBEDDINGS_MODEL`, nothing computed in process and no
weights downloaded. Vectors come back unit length, so a dot product is their cosine."""

from __future__ import annotations

import math
from collections.abc import Sequence

import httpx

BATCH = 64  # inputs per request: every provider takes this many
TIMEOUT = 60.0


class EmbeddingError(Exception):
    """The endpoint failed or answered something else than vectors; the message is for the user."""


def unit(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    return [x / norm for x in vector] if norm else [0.0 for _ in vector]


class Embedder:
    def __init__(self, model: str, base_url: str, api_key: str | None) -> None:
        self.model = model
        self._url = base_url.rstrip("/") + "/embeddings"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=TIMEOUT, headers=headers)

    async def close(self) -> None:
        await self._client.aclose()

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            vectors += await self._batch(list(texts[start:start + BATCH]))
        return vectors

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        try:
            response = await self._client.post(self._url, json={"model": self.model, "input": texts})
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"the embeddings endpoint could not be reached ({type(exc).__name__})") from None
        if response.status_code != 200:
            raise EmbeddingError(f"the embeddings endpoint answered {response.status_code}")
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = [unit([float(x) for x in item["embedding"]]) for item in data]
        except (ValueError, KeyError, TypeError):
            raise EmbeddingError("the embeddings endpoint answered something else than vectors") from None
        if len(vectors) != len(texts) or len({len(v) for v in vectors}) > 1:
            raise EmbeddingError("the embeddings endpoint answered a different number or size of vectors")
        return vectors
