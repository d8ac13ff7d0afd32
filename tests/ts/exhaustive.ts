// What a browser client writes against the types json-schema-to-typescript makes of
// GET /api/protocol (tests/test_schema_ts.py generates ./protocol.ts beside this file and runs
// `tsc --strict` on both). Every `switch (frame.type)` must be exhaustive: the `never` in the
// default branch stops compiling when a frame type is missing here or `type` is optional there.
// A new frame type in chat_agent/protocol.py needs its case here.
import type { ClientFrame, ServerFrame } from "./protocol";

function unhandled(frame: never): never {
  throw new Error(`unhandled frame ${JSON.stringify(frame)}`);
}

// Fields the server always sends are required: these use them without a check for undefined.
export function describe(frame: ServerFrame): string {
  switch (frame.type) {
    case "session":
      return `${frame.conversationId} at ${frame.seq + 0}: ${frame.messages.length} messages, ` +
        `${frame.context.tokens}/${frame.context.maxTokens} tokens, running ${frame.running}, ` +
        `tools ${frame.tools.map((t) => t.name).join()}, protocol ${frame.protocolVersion + 0}, ` +
        `features ${frame.features.join()}, last ${frame.messages.map((m) => m.parts.map(part).join("|")).pop() ?? ""}, ` +
        // always sent (1.1 paging): null, or the id of the oldest message sent when older ones exist
        `older ${frame.moreBefore === null ? "none" : frame.moreBefore.length}, ` +
        `waiting ${frame.pendingApprovals.map((a) => `${a.toolId} ${a.name} ${a.messageId}`).join()}`;
    case "content_chunk":
    case "thinking_chunk":
      return `${frame.messageId} #${frame.seq + 1}: ${frame.content.length}`;
    case "tool_start":
      return `${frame.toolId} ${frame.name} ${Object.keys(frame.input).length}`;
    case "approval_request":
      return `${frame.messageId} ${frame.toolId} ${frame.name} ${Object.keys(frame.input).length}`;
    case "tool_progress":
      return `${frame.toolId} ${frame.elapsed.toFixed(1)} ${frame.status}`;
    case "tool_end":
      return `${frame.toolId} ${frame.name} ${frame.duration.toFixed(1)} ${frame.isError ? "failed" : "ok"}`;
    case "artifact_chunk":
      return `${frame.toolId} ${frame.content.length}`;
    case "artifact":
      return `${frame.artifact.id} ${frame.artifact.currentIndex}/${frame.artifact.versionCount} ` +
        `${frame.artifact.current.type} ${frame.artifact.current.content.length}`;
    case "artifact_edit":
      // Optional fields stay optional: title and language come only when they changed.
      return `${frame.artifactId} ${frame.baseIndex + 0}->${frame.index + 0} ` +
        frame.changes.map((c) => `${c.start + 0}-${c.end + 0}:${c.text.length}`).join() +
        (frame.title == null ? "" : ` ${frame.title.toUpperCase()}`) +
        (frame.language == null ? "" : ` ${frame.language.toLowerCase()}`);
    case "title":
      return frame.title.toUpperCase();
    case "context_update":
      return `${frame.tokens}/${frame.maxTokens}${frame.summarized ? " summarized" : ""}`;
    case "context_cleared":
      return `cleared at ${frame.seq + 0}`;
    case "done":
      return `${frame.messageId} ${frame.stopReason} ${frame.usage.inputTokens + frame.usage.outputTokens}` +
        (frame.detail === undefined ? "" : ` (${frame.detail})`);
    case "error":
      return `${frame.code}: ${frame.message}${frame.seq === undefined ? "" : ` at ${frame.seq}`}`;
    case "status":
      // 1.2 "Live status": never in the event log, so no seq; messageId only when about a reply.
      return `${frame.state} ${frame.elapsed.toFixed(1)} ${frame.detail}${frame.messageId == null ? "" : ` ${frame.messageId}`}`;
    case "review":
      // 1.2 "Review": the target is a discriminated union on `kind`.
      return `${frame.reviewId} ${frame.passed ? "passed" : "failed"} ${frame.score.toFixed(2)} ` +
        `${frame.target.kind === "artifact" ? `v${frame.target.index + 0}` : frame.target.fileId} ` +
        `${frame.feedback} ${frame.suggestions.join("; ")} r${frame.revision + 0}`;
    case "review_request":
      return `${frame.messageId} asks about ${frame.reviewId}`;
    case "review_decision":
      return `${frame.reviewId} ${frame.decision}${frame.reason == null ? "" : ` (${frame.reason})`}`;
    case "history":
      // 1.2 trees: the active path changed.
      return `path to ${frame.leafId ?? "the start"}: ${frame.messages.length}${frame.moreBefore == null ? "" : "+"}`;
    case "citation":
      // 1.2 "Knowledge bases and citations": a numbered source of the text streamed so far.
      return `[${frame.citation.index + 0}] ${frame.citation.filename}` +
        (frame.citation.page == null ? "" : ` p. ${frame.citation.page + 0}`) + ` ${frame.citation.quote.length}`;
    case "pong":
      return "pong";
    default:
      return unhandled(frame);
  }
}

// A visible message's parts (PROTOCOL 1.1) are a discriminated union too.
type Part = Extract<ServerFrame, { type: "session" }>["messages"][number]["parts"][number];

function part(p: Part): string {
  switch (p.type) {
    case "text":
    case "thinking":
      return `${p.type} ${p.text.length}`;
    case "tool":
      return `${p.name} ${p.toolId} ${p.isError ? "failed" : "ok"}`;
    case "attachment":
      return `attachment ${p.kind}`;
    case "review":
      return `review ${p.reviewId} ${p.score.toFixed(2)}${p.decision == null ? "" : ` ${p.decision}`}`;
    default:
      return unhandled(p);
  }
}

export function encode(frame: ClientFrame): string {
  switch (frame.type) {
    case "message":
      return `message ${frame.content ?? ""}`;
    case "abort":
    case "clear_context":
    case "ping":
      return frame.type;
    case "select_artifact_version":
      return `select ${frame.index + 0}`;
    case "edit_artifact":
      return `edit ${frame.content.length}`;
    case "resume":
      return `resume ${frame.afterSeq + 0}`;
    case "approve":
      return `approve ${frame.toolId} ${frame.approved ? "yes" : "no"}${frame.message ?? ""}`;
    case "review_decision":
      return `review ${frame.reviewId} ${frame.decision}${frame.message ?? ""}`;
    case "regenerate":
      return `regenerate ${frame.messageId ?? "the last reply"}`;
    case "switch_branch":
      return `switch to ${frame.messageId}`;
    case "rename":
      return `rename ${frame.title}`;
    case "tool_result":
      return `result of ${frame.toolId}${frame.isError ? " (failed)" : ""}: ${frame.content.length}`;
    default:
      return unhandled(frame);
  }
}
