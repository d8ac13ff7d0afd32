"""Knowledge bases: a user's collections of documents, chunked and indexed in the background,
searched by the agent's `search_knowledge` tool, and cited in its answers.

    knowledge = create_knowledge(settings, store, files)   # None on an in-memory store
    await knowledge.start()
    collection = await knowledge.create_collection(owner, "Handbooks")
    document = await knowledge.add_document(owner, collection.id, upload_id)   # indexed by a job
    hits = await knowledge.search(owner, [collection.id], "vacation policy")
"""

from chat_agent.knowledge.records import Chunk, Collection, Document, Hit, KnowledgeError
from chat_agent.knowledge.service import Knowledge, create_knowledge

__all__ = ["Chunk", "Collection", "Document", "Hit", "Knowledge", "KnowledgeError", "create_knowledge"]
