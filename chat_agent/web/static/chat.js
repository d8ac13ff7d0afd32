// The conversation column: messages in the order their parts happened (text, thinking, tool
// cards, attachments), streamed as frames arrive.
import { escapeHtml, imageNode, renderMarkdown } from "./markdown.js";
import { planList } from "./plan.js";
import { reviewCard } from "./reviews.js";

const STOPS = { aborted: "Stopped.", max_steps: "Stopped: the step limit was reached.",
  max_tokens: "Cut off: the output limit was reached.", refusal: "The model declined to answer.",
  error: "The reply failed.", interrupted: "Interrupted: the server stopped during this reply." };

function el(tag, className, html) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (html !== undefined) node.innerHTML = html;
  return node;
}

function seconds(value) { return `${Number(value || 0).toFixed(1)} s`; }

function inputSummary(name, input) {
  if (!input) return "";
  if (name === "web_search" || name === "deep_research") return input.query || input.question || "";
  if (name === "generate_artifact" || name === "rewrite_artifact") return input.title || "";
  if (name === "update_artifact") return input.target ? `“${String(input.target).slice(0, 60)}”` : "the selection";
  return "";
}

function images(output) {
  const found = [];
  const walk = (value) => {
    if (!value || typeof value !== "object") return;
    if (typeof value.url === "string" && /image|\.png|\.jpe?g|\.webp|\.gif/i.test((value.mediaType || "") + value.url)) found.push(value.url);
    for (const v of Array.isArray(value) ? value : Object.values(value)) walk(v);
  };
  walk(output);
  return [...new Set(found)];
}

export class Chat {
  constructor(root, empty) {
    this.root = root;
    this.empty = empty;
    this.linkFor = () => null;  // a citation's link to its document (set by the page)
    this.actions = null;        // each message's controls: copy, regenerate, edit, branches (branches.js)
    this.messages = new Map();  // id -> {node, last: {kind, node, text}}
    this.tools = new Map();     // toolId -> card
  }

  reset() {
    this.root.replaceChildren(this.empty);
    this.empty.hidden = false;
    this.messages.clear();
    this.tools.clear();
  }

  renderHistory(messages) {
    this.reset();
    for (const message of messages) {
      if (message.role === "user") { this.addUser(message.content, (message.parts || []).filter((p) => p.type === "attachment"), message); continue; }
      const entry = this.assistant(message.id, message.createdAt);
      for (const part of message.parts || []) {
        if (part.type === "text") {
          this.text(message.id, part.text, true);
          for (const citation of part.citations || []) this.citation(message.id, citation);
        }
        else if (part.type === "thinking") this.thinking(message.id, part.text, true);
        else if (part.type === "tool") {
          this.toolStart({ messageId: message.id, toolId: part.toolId, name: part.name, input: part.input });
          if (part.output !== undefined && part.output !== null || part.duration) this.toolEnd(part);
        } else if (part.type === "review") this.review({ messageId: message.id, ...part });
      }
      this.finish(message.id, message.status, null, message.status === "streaming");
      if (message.status !== "streaming") entry.node.classList.remove("streaming");
      this.decorate(entry.node, message);
    }
    this.scroll(true);
  }

  /** The message's controls, once it is complete (a reply) or sent (the user's). */
  decorate(node, message) {
    this.actions?.attach(node, { id: message.id || node.dataset.id || null, role: node.dataset.role,
      branch: message.branch, text: () => this.textOf(node) });
  }

  /** What a reply said, as Markdown (its text parts, as `content` joins them). */
  textOf(node) {
    const entry = this.messages.get(node.dataset.id);
    return entry ? entry.texts.map((t) => t.text).join("\n\n") : node.querySelector(".user-text")?.textContent || "";
  }

  /** The message nodes shown, oldest first: the path the page shows (branches.js matches it to the tree). */
  shown() { return [...this.root.querySelectorAll(":scope > .message[data-role]")]; }

  /** A line for the user's own edit of the artifact (`version` from the versions list), in its
   * place in time among the messages; once per version. */
  userEdit(version, kind, select) {
    if (this.root.querySelector(`.user-edit[data-index="${Number(version.index)}"]`)) return;
    const line = el("div", "user-edit");
    line.dataset.index = version.index;
    line.dataset.createdAt = version.createdAt;
    line.append(el("span", "user-edit-text"));
    line.firstChild.textContent = `You edited the ${kind === "code" ? "code" : "document"} (v${version.index})`;
    const show = el("button", "ghost small", "Show");
    show.type = "button";
    show.setAttribute("aria-label", `Show version ${version.index} of the artifact`);
    show.addEventListener("click", () => select(version.index));
    line.append(show);
    const after = [...this.root.querySelectorAll(":scope > [data-created-at]")]
      .find((node) => Number(node.dataset.createdAt) > Number(version.createdAt));
    this.empty.hidden = true;
    if (after) after.before(line); else this.root.append(line);
    this.scroll();
  }

  /** A user message; `sent`: its attachments as the message sent them (a stored message's
   * parts name their files), for an edit that sends it again. */
  addUser(text, attachments = [], message = null, sent = null) {
    this.empty.hidden = true;
    const node = el("div", "message user");
    node.resend = { previews: attachments,
      attachments: sent ?? attachments.filter((a) => a.fileId).map((a) => ({ type: a.kind, uploadId: a.fileId })) };
    node.dataset.role = "user";
    node.dataset.createdAt = message?.createdAt ?? Date.now() / 1000;
    if (attachments.length) {
      const thumbs = el("div", "attachment-thumbs");
      for (const a of attachments) {
        if ((a.kind || a.type) === "image" && (a.url || a.preview)) {
          thumbs.append(imageNode(a.preview || a.url, a.filename || "image"));
        } else thumbs.append(el("span", "doc-chip", "Document: " + escapeHtml(a.filename || "document")));
      }
      node.append(thumbs);
    }
    const words = el("div", "user-text");
    words.textContent = text;
    node.append(words);
    if (message?.id) node.dataset.id = message.id;
    this.root.append(node);
    this.decorate(node, message || {});
    this.scroll(true);
    return node;
  }

  assistant(id, createdAt = Date.now() / 1000) {
    let entry = this.messages.get(id);
    if (!entry) {
      this.empty.hidden = true;
      const node = el("div", "message assistant streaming");
      node.dataset.id = id;
      node.dataset.role = "assistant";
      node.dataset.createdAt = createdAt;
      this.root.append(node);
      entry = { node, last: null, texts: [] };
      this.messages.set(id, entry);
    }
    return entry;
  }

  text(id, chunk, whole = false) {
    const entry = this.assistant(id);
    if (!entry.last || entry.last.kind !== "text" || whole) this.textPart(entry);
    entry.last.text += chunk;
    this.paint(entry.last, (part) => this.drawText(part));
  }

  textPart(entry) {
    entry.last = { kind: "text", node: el("div", "text"), text: "" };
    entry.texts.push(entry.last);
    entry.node.append(entry.last.node);
  }

  /** The text with its citations' numbered marks right after the words they support: each
   * mark's place is held in the Markdown by a private-use character pair, drawn after rendering. */
  drawText(part) {
    const citations = part.citations || [];
    let source = part.text;
    for (let i = citations.length - 1; i >= 0; i--) {
      const at = Math.min(citations[i].at ?? source.length, source.length);
      source = source.slice(0, at) + `\uE000${i}\uE001` + source.slice(at);
    }
    part.node.innerHTML = renderMarkdown(source).replace(/\uE000(\d+)\uE001/g, (_, i) => this.mark(citations[Number(i)]));
  }

  mark(citation) {
    const link = this.linkFor(citation);
    const title = escapeHtml(`${citation.filename}${citation.page ? `, page ${citation.page}` : ""}: “${citation.quote}”`);
    const label = `[${Number(citation.index)}]`;
    const inner = link ? `<a href="${escapeHtml(link)}" target="_blank" rel="noopener" title="${title}">${label}</a>`
      : `<span title="${title}">${label}</span>`;
    return `<sup class="cite">${inner}</sup>`;
  }

  /** A citation of the text streamed so far (a `citation` frame, or a stored part's): a mark
   * after it, and a line in the message's sources with the quote and a link to the document. */
  citation(id, citation) {
    const entry = this.assistant(id);
    if (!entry.last || entry.last.kind !== "text") this.textPart(entry);
    // Live, it follows the text streamed so far; from the history, where its `offset` says.
    (entry.last.citations ||= []).push({ ...citation, at: citation.offset ?? entry.last.text.length });
    this.paint(entry.last, (part) => this.drawText(part));
    let sources = entry.node.querySelector(":scope > .sources");
    if (!sources) { sources = el("ol", "sources"); entry.node.append(sources); }
    const key = `${citation.index}:${citation.documentId}`;
    if ([...sources.children].some((li) => li.dataset.key === key)) return;
    const line = el("li");
    line.dataset.key = key;
    const link = this.linkFor(citation);
    const name = el(link ? "a" : "span");
    if (link) Object.assign(name, { href: link, target: "_blank", rel: "noopener" });
    name.textContent = `[${citation.index}] ${citation.filename}${citation.page ? `, page ${citation.page}` : ""}`;
    line.append(name, document.createTextNode(` — “${citation.quote}”`));
    sources.append(line);
  }

  thinking(id, chunk, whole = false) {
    const entry = this.assistant(id);
    if (!entry.last || entry.last.kind !== "thinking" || whole) {
      const node = el("details", "thinking", "<summary>Thinking</summary><div></div>");
      entry.last = { kind: "thinking", node, text: "" };
      entry.node.append(node);
    }
    entry.last.text += chunk;
    entry.last.node.lastElementChild.textContent = entry.last.text;
    this.scroll();
  }

  /** Redraws a streamed part once per animation frame, however many chunks arrived. */
  paint(part, draw) {
    if (part.queued) return;
    part.queued = true;
    requestAnimationFrame(() => { part.queued = false; draw(part); this.scroll(); });
  }

  toolStart(frame) {
    const entry = this.assistant(frame.messageId);
    const card = el("details", "tool running");
    card.dataset.toolId = frame.toolId;
    card.dataset.name = frame.name;
    card.innerHTML = `<summary><span class="spinner"></span><span class="name">${escapeHtml(frame.name)}</span>
      <span class="tool-status">${escapeHtml(inputSummary(frame.name, frame.input))}</span><span class="badge">running</span></summary>
      <div class="body"><div class="label">Input</div><pre class="input" tabindex="0"></pre><div class="output-area"></div></div>`;
    card.querySelector(".input").textContent = JSON.stringify(frame.input ?? {}, null, 2);
    if (frame.name === "update_plan") this.plan(entry, card, frame.input);
    entry.node.append(card);
    entry.last = { kind: "tool", node: card };
    this.tools.set(frame.toolId, card);
    this.scroll();
    return card;
  }

  toolCard(toolId) { return this.tools.get(toolId); }

  /** PROTOCOL 1.2 "Plans": an `update_plan` card is the plan as a checklist, open; the reply's
   * earlier plan cards fold away, so the latest plan is the one in sight. */
  plan(entry, card, input) {
    const steps = Array.isArray(input?.steps) ? input.steps : [];
    const { list, done } = planList(steps);
    card.classList.add("plan");
    card.querySelector(".tool-status").textContent = `Plan: ${done} of ${steps.length} done`;
    card.querySelector(".body").prepend(list);
    for (const older of entry.node.querySelectorAll("details.tool.plan")) older.open = false;
    card.open = true;
  }

  /** A reviewer's verdict in its reply, where it happened. */
  review(frame) {
    const entry = this.assistant(frame.messageId);
    const card = reviewCard(frame);
    entry.node.append(card);
    entry.last = { kind: "review", node: card };
    this.scroll();
    return card;
  }

  reviewCard(reviewId) {
    return this.root.querySelector(`.review[data-review-id="${CSS.escape(reviewId)}"]`);
  }

  toolProgress(frame) {
    const card = this.tools.get(frame.toolId);
    if (!card) return;
    card.querySelector(".tool-status").textContent = frame.status;
    card.querySelector(".badge").textContent = seconds(frame.elapsed);
  }

  toolEnd(frame) {
    const card = this.tools.get(frame.toolId);
    if (!card) return;
    card.classList.remove("running", "waiting");
    card.classList.add(frame.isError ? "failed" : "done");
    card.querySelector(".spinner")?.remove();
    card.querySelector(".badge").textContent = (frame.isError ? "failed · " : "done · ") + seconds(frame.duration);
    const area = card.querySelector(".output-area");
    area.replaceChildren(el("div", "label", "Output"));
    const pre = el("pre", "output");
    pre.tabIndex = 0;  // it scrolls: the keyboard can too
    pre.textContent = typeof frame.output === "string" ? frame.output : JSON.stringify(frame.output, null, 2);
    area.append(pre);
    for (const url of images(frame.output)) area.append(imageNode(url, "tool image"));
    if (frame.isError) card.open = true;
  }

  /** A turn ended: running cards that never got tool_end are closed, the stop reason noted. */
  finish(id, status, detail, streaming = false) {
    const entry = this.messages.get(id);
    if (!entry) return;
    if (!streaming) entry.node.classList.remove("streaming");
    const note = STOPS[status];
    if (note && !streaming) {
      const line = el("div", "note" + (status === "aborted" ? "" : " error"));
      line.textContent = detail ? `${note} ${detail}` : note;
      entry.node.append(line);
    }
    if (!streaming) this.decorate(entry.node, {});
    this.scroll();
  }

  failTurn(message) {
    const line = el("div", "message assistant");
    line.append(el("div", "note error", escapeHtml(message)));
    this.root.append(line);
    this.scroll(true);
  }

  scroll(force = false) {
    const near = this.root.scrollHeight - this.root.scrollTop - this.root.clientHeight < 160;
    if (force || near) this.root.scrollTop = this.root.scrollHeight;
  }
}
