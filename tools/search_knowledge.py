"""`search_knowledge`: searches the knowledge collections the user chose for this message, and
returns the best chunks as search results the model can cite (its citations come back to the
user as numbered marks with the quote, the file and the page)."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, tool
from pydantic import Field

from chat_agent.tooling import Hit, Settings, ToolContext, source_of

NAME = "search_knowledge"
MAX_RESULTS = 10

DESCRIPTION = """Search the user's knowledge base: the documents of the collections the user chose
for this conversation (their own files: handbooks, reports, notes, papers).

Use it whenever the question may be answered by those documents, before answering from your own
knowledge, and search again with other words when the results do not answer it. It returns the
passages that best match `query`, each with its document, page and section. Base your answer on
them and cite them; say so when they do not hold the answer."""


def _title(hit: Hit) -> str:
    where = [hit.filename]
    if hit.page is not None:
        where.append(f"page {hit.page}")
    if hit.heading:
        where.append(hit.heading)
    return " — ".join(where)


def _result(hit: Hit) -> dict[str, Any]:
    return {"type": "search_result", "source": source_of(hit), "title": _title(hit),
            "content": [{"type": "text", "text": hit.text}], "citations": {"enabled": True}}


def build(settings: Settings) -> BaseTool:
    @tool(NAME, description=DESCRIPTION, response_format="content_and_artifact")
    async def search_knowledge(
        ctx: Annotated[ToolContext, InjectedToolArg],
        query: Annotated[str, Field(description="What to look for: a question or the words the passage would use.")],
        limit: Annotated[int, Field(ge=1, le=MAX_RESULTS, description="How many passages to return.")] = 5,
    ) -> tuple[list[dict[str, Any]] | str, dict[str, Any]]:
        if not query.strip():
            raise ValueError("The query is empty.")
        ctx.progress(f"Searching the knowledge base for {query}")
        hits = await ctx.knowledge.search(query, limit)
        found = [{"documentId": h.document_id, "filename": h.filename, "page": h.page, "heading": h.heading,
                  "chunkId": h.chunk_id, "source": source_of(h)} for h in hits]
        if not hits:
            return f"Nothing in the knowledge base matches {query!r}.", {"query": query, "results": []}
        return [_result(h) for h in hits], {"query": query, "results": found}

    # It only reads: a turn that continues after a failure may run it again.
    search_knowledge.metadata = {"repeatable": True}
    return search_knowledge
