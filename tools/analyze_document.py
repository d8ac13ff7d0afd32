"""`analyze_document`: reads a large attached document on demand, a few pages or sections at a
time or by searching it, so a long file costs only what the model chooses to read."""

from __future__ import annotations

from typing import Annotated, Any

from langchain_core.tools import BaseTool, InjectedToolArg, tool
from pydantic import Field

from chat_agent.tooling import Settings, StoredFile, ToolContext, read_parts, search

NAME = "analyze_document"

DESCRIPTION = """Read a document the user attached (PDF, Word, text, Markdown or CSV).

Documents too long to show whole are described in the conversation with their id
(`[document file_…]`), their number of pages or sections and how they begin. Use this tool
to read them: `parts` takes page or section numbers ("3", "3-5", "1,4,7-9", up to 20 at a
time), `query` finds a word or phrase and shows where it occurs. With neither, it tells
you how the document is divided. Cite page numbers when you quote a PDF."""


class DocumentNotFound(LookupError):
    pass


def build(settings: Settings) -> BaseTool:
    @tool(NAME, description=DESCRIPTION, response_format="content_and_artifact")
    async def analyze_document(
        ctx: Annotated[ToolContext, InjectedToolArg],
        document_id: Annotated[str | None, Field(
            description="The document's id (file_…); may be left out when the conversation has one document.")] = None,
        parts: Annotated[str | None, Field(description="Pages or sections to read, e.g. \"3\", \"3-5\", \"1,4,7-9\".")] = None,
        query: Annotated[str | None, Field(description="A word or phrase to search the document for.")] = None,
    ) -> tuple[str, dict[str, Any]]:
        file = await _pick(ctx, document_id)
        ctx.progress(f"Reading {file.filename}")
        doc = await ctx.documents.parsed(ctx.owner, file)
        if parts:
            text = read_parts(doc, parts)
        elif query is not None:
            text = search(doc, query)
        else:
            text = (f"{file.filename} ({file.id}) has {len(doc.parts)} {doc.unit}"
                    f"{'s' if len(doc.parts) != 1 else ''} and {doc.chars:,} characters. "
                    f"Read {doc.unit}s by number with `parts`, or search it with `query`.")
        return text, {"documentId": file.id, "filename": file.filename, "parts": parts, "query": query,
                      "unit": doc.unit, "partCount": len(doc.parts), "chars": len(text)}

    # It only reads: a turn that continues after a failure may run it again.
    analyze_document.metadata = {"repeatable": True}
    return analyze_document


async def _pick(ctx: ToolContext, document_id: str | None) -> StoredFile:
    documents = await ctx.files.documents()
    if document_id is None:
        if len(documents) == 1:
            return documents[0]
        if not documents:
            raise DocumentNotFound("No document is attached to this conversation.")
        listing = ", ".join(f"{d.id} ({d.filename})" for d in documents)
        raise DocumentNotFound(f"Several documents are attached; give document_id, one of: {listing}")
    for file in documents:
        if file.id == document_id:
            return file
    known = ", ".join(f"{d.id} ({d.filename})" for d in documents) or "none"
    raise DocumentNotFound(f"No document {document_id!r} in this conversation. Attached documents: {known}")

