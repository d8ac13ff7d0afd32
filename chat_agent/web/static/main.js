// The canvas page: wires the socket's frames to the chat, the canvas and the side panels.
import { auth, download, request, HttpError } from "./api.js";
import { Approvals } from "./approvals.js";
import { Branches } from "./branches.js";
import { Canvas } from "./canvas.js";
import { Chat } from "./chat.js";
import { Composer } from "./composer.js";
import { Connection, savedPlace } from "./connection.js";
import { UserEdits } from "./edits.js";
import { Knowledge } from "./knowledge.js";
import { latestPlan, PlanBar } from "./plan.js";
import { Conversations, CustomActions, memoriesPanel } from "./panels.js";
import { renderQuickActions } from "./quick.js";
import { Reviews } from "./reviews.js";

const $ = (id) => document.getElementById(id);
let running = false;
let customActions = [];

function toast(message, isError = false) {
  const node = Object.assign(document.createElement("div"), { className: "toast" + (isError ? " error" : ""), textContent: message });
  $("toasts").append(node);
  setTimeout(() => node.remove(), isError ? 6000 : 3000);
}

const connection = new Connection({
  onSession: (frame, resumed) => session(frame, resumed),
  onFrame: (frame) => handle(frame),
  onStatus: (text, kind) => { const s = $("connection"); s.textContent = text; s.className = "status " + kind; },
  onUnauthorized: () => askToken(true),
  onGone: () => { toast("That conversation no longer exists.", true); openConversation(null); },
});
const send = (frame) => {
  if (connection.send(frame)) return true;
  toast("Not connected; trying again…", true);
  return false;
};
const chat = new Chat($("messages"), $("empty-chat"));
const canvas = new Canvas({ send, conversation: () => connection.conversationId, toast });
const approvals = new Approvals({ send, cardFor: (id) => chat.toolCard(id), host: () => $("messages") });
const reviews = new Reviews({ send, cardFor: (id) => chat.reviewCard(id) });
const conversations = new Conversations({ open: (id) => openConversation(id), current: () => connection.conversationId, toast });
const actions = new CustomActions({ toast, changed: (list) => { customActions = list; quickBar(); } });
memoriesPanel(toast);
const knowledge = new Knowledge({ toast });
chat.linkFor = (citation) => knowledge.link(citation);

function setRunning(on) {
  running = on;
  $("stop").hidden = !on;
  $("send").disabled = on;
}

function setTitle(title) {
  $("conversation-title").textContent = title || "New conversation";
  document.title = (title ? title + " · " : "") + "Canvas";
}

function tokens(used, max) {
  $("token-fill").style.width = `${Math.min(100, (100 * used) / Math.max(1, max))}%`;
  $("token-text").textContent = `${used.toLocaleString()} / ${max.toLocaleString()} tokens`;
}

function quickBar() {
  const current = canvas.current;
  if (current) renderQuickActions($("quick-actions"), current.type, customActions, runQuickAction);
}

// ---- the chat's own controls: models, copy, regenerate, edit and resend, branches, edit lines --
let pendingEdit = null;  // an edited message sent: shown once `history` has redrawn the path
const branches = new Branches({
  conversation: () => connection.conversationId, send, toast, running: () => running,
  regenerate: (messageId) => {
    if (send({ type: "regenerate", messageId, id: crypto.randomUUID(), settings: turnSettings() })) { planBar.set(null); setRunning(true); }
  },
  resend: (editOf, content, { attachments = [], previews = [] } = {}) =>
    sendMessage({ content, editOf, settings: turnSettings(), ...(attachments.length ? { attachments } : {}) }, content, previews),
});
chat.actions = branches;
const planBar = new PlanBar($("messages"));
const userEdits = new UserEdits({ conversation: () => connection.conversationId, canvas, chat });

/** `history` (PROTOCOL 1.2 trees): the active path changed; an edited message follows it. */
function history(frame) {
  let messages = frame.messages || [];
  // The path ends before the edited message; a server that stores "before the first message"
  // as "no leaf" sends the old path whole (its newest message): cut it there.
  const cut = pendingEdit ? messages.findIndex((m) => m.id === pendingEdit.editOf) : -1;
  if (cut >= 0) messages = messages.slice(0, cut);
  chat.renderHistory(messages);
  planBar.set(latestPlan(messages));
  if (pendingEdit) { chat.addUser(pendingEdit.visible, pendingEdit.previews, null, pendingEdit.attachments); pendingEdit = null; }
  userEdits.sync();
}

function session(frame, resumed) {
  const banner = $("demo-banner");
  banner.hidden = !frame.notice;
  banner.textContent = frame.notice || "";
  setTitle(frame.title);
  tokens(frame.context.tokens, frame.context.maxTokens);
  composer.models(frame.models);
  const search = (frame.tools || []).find((t) => t.name === "web_search");
  $("opt-search").disabled = !!search && !search.enabled;
  $("opt-search").parentElement.title = search && !search.enabled ? search.reason || "" : "";
  if (resumed) return;  // the page shows all of it already; the replay brings the rest
  chat.renderHistory(frame.messages || []);
  planBar.set(frame.plan);
  approvals.restore(frame.pendingApprovals);
  reviews.restore(frame.pendingReviews);
  canvas.set(frame.artifact);
  userEdits.sync();
  quickBar();
  setRunning(!!frame.running);
  conversations.mark(frame.title);
}

function handle(frame) {
  switch (frame.type) {
    case "content_chunk": chat.text(frame.messageId, frame.content); setRunning(true); break;
    case "thinking_chunk": chat.thinking(frame.messageId, frame.content); setRunning(true); break;
    case "citation": chat.citation(frame.messageId, frame.citation); break;
    case "tool_start": chat.toolStart(frame); planBar.toolStart(frame); setRunning(true); break;
    case "tool_progress": approvals.resolve(frame.toolId); chat.toolProgress(frame); break;  // answered (maybe elsewhere)
    case "tool_end": approvals.resolve(frame.toolId); chat.toolEnd(frame); planBar.toolEnd(frame); break;
    case "approval_request": approvals.request(frame); break;
    case "review": chat.review(frame); break;
    case "review_request": reviews.request(frame); break;
    case "review_decision": reviews.decided(frame); break;
    case "artifact_chunk": canvas.chunk(frame); break;
    case "artifact": canvas.set(frame.artifact); quickBar(); if (!running) userEdits.sync(); break;
    case "artifact_edit": canvas.edit(frame).then(() => { quickBar(); if (!running) userEdits.sync(); }, (e) => toast(e.message, true)); break;
    case "history": history(frame); break;
    case "title": setTitle(frame.title); conversations.mark(frame.title); break;
    case "context_update": tokens(frame.tokens, frame.maxTokens); break;
    case "context_cleared": chat.reset(); planBar.set(null); toast("Context cleared: the artifact and your memories stay."); break;
    case "done":
      chat.finish(frame.messageId, frame.stopReason, frame.detail);
      setRunning(false);
      if (canvas.live) canvas.set(canvas.state);  // a write that never finished
      conversations.mark();
      branches.refresh(chat.shown(), (node) => chat.textOf(node));
      break;
    case "error": error(frame); break;
    case "pong": break;
    default: break;  // a newer server's frame this page does not know
  }
}

function error(frame) {
  pendingEdit = null;  // an edited message refused: no `history` will come for it
  if (frame.code === "unauthorized") { askToken(true); return; }
  if (["busy", "empty_message", "invalid_highlight", "no_artifact", "invalid_attachment", "too_large", "invalid_frame", "not_found"].includes(frame.code)) {
    toast(frame.message, true);
    if (frame.code !== "busy") setRunning(false);
    return;
  }
  chat.failTurn(frame.message);
  setRunning(false);
}

function sendMessage(message, visible, previews = []) {
  if (running) { toast("Wait for the reply, or stop it.", true); return false; }
  const frame = { type: "message", id: crypto.randomUUID(), ...message };
  if (!send(frame)) return false;
  const sent = message.attachments || [];
  if (message.editOf) pendingEdit = { visible, previews, editOf: message.editOf, attachments: sent };
  else chat.addUser(visible, previews, null, sent);
  planBar.set(null);  // a new turn: its plan, if it keeps one
  setRunning(true);
  return true;
}

/** A turn's `message.settings`: the composer's, and the knowledge bases picked. */
function turnSettings(settings = composer.settings()) {
  return { ...settings, ...(knowledge.selected().length ? { knowledge: knowledge.selected() } : {}) };
}

const composer = new Composer({
  toast,
  submit: ({ content, attachments, previews, settings }) => {
    const message = { content, settings: turnSettings(settings) };
    if (attachments.length) message.attachments = attachments;
    return sendMessage(message, content, previews);
  },
});

function runQuickAction(action, label) {
  sendMessage({ content: "", canvas: { quickAction: action } }, `Quick action: ${label}`);
}

// ---- highlight: select text in the artifact, say what to change ------------------------------
let span = null;
document.addEventListener("mouseup", (event) => {
  if ($("highlight-box").contains(event.target)) return;
  setTimeout(() => {
    const picked = canvas.selection();
    const box = $("highlight-box");
    if (!picked || running) { box.hidden = true; span = null; return; }
    span = picked;
    const area = $("canvas").getBoundingClientRect();
    box.hidden = false;
    box.style.left = `${Math.max(8, Math.min(area.width - 350, picked.rect.left - area.left))}px`;
    box.style.top = `${picked.rect.bottom - area.top + 8}px`;
    $("highlight-quote").textContent = picked.selectedText;
    $("highlight-input").value = "";
    $("highlight-input").focus({ preventScroll: true });
  });
});
$("highlight-box").addEventListener("submit", (event) => {
  event.preventDefault();
  const ask = $("highlight-input").value.trim();
  if (!span || !ask) return;
  const { start, end, selectedText } = span;
  if (sendMessage({ content: ask, canvas: { highlight: { start, end, selectedText } } }, `Edit “${selectedText.slice(0, 80)}”: ${ask}`)) {
    canvas.highlightSent({ start, end });
  }
  $("highlight-box").hidden = true;
  span = null;
});

// ---- the bars' buttons ------------------------------------------------------------------------
$("stop").addEventListener("click", () => send({ type: "abort" }));
$("clear-context").addEventListener("click", () => {
  if (confirm("Empty this conversation's history? The artifact and your memories stay.")) send({ type: "clear_context" });
});
$("new-conversation").addEventListener("click", () => openConversation(null));
$("export-button").addEventListener("click", (e) => { e.stopPropagation(); $("export-menu").hidden = !$("export-menu").hidden; });
document.addEventListener("click", () => { $("export-menu").hidden = true; });
for (const item of document.querySelectorAll("#export-menu button")) {
  item.addEventListener("click", async () => {
    const format = item.dataset.format;
    try {
      const name = await download(`/api/conversations/${connection.conversationId}/artifact/export?format=${format}`, `artifact.${format}`);
      toast(`Downloaded ${name}`);
    } catch (e) { toast(e.message, true); }
  });
}
$("sign-out").addEventListener("click", () => { auth.token = ""; location.reload(); });

function openConversation(id) {
  canvas.closeEditor();
  chat.reset();
  planBar.set(null);
  approvals.clear();
  reviews.clear();
  canvas.set(null);
  setTitle(null);
  setRunning(false);
  connection.open(id);
  conversations.mark();
}

// ---- auth: a token prompt when the server asks for one ---------------------------------------
function askToken(rejected) {
  const dialog = $("token-dialog");
  if (dialog.open) return;
  connection.close();
  $("token-error").hidden = !rejected || !auth.token;
  dialog.showModal();
}
$("token-form").addEventListener("submit", () => {
  auth.token = $("token-input").value.trim();
  // For the console (and the browser tests): the live connection, to look at or to drop.
window.chatAgent = { connection };

start();
});

async function start() {
  try {
    await conversations.load();
  } catch (e) {
    if (e instanceof HttpError && e.status === 401) { askToken(true); return; }
    toast(e.message, true);
  }
  $("sign-out").hidden = !auth.token;
  actions.load().catch((e) => toast(e.message, true));
  // Before the history: its citations link to documents. A server without knowledge bases (its
  // store in memory) answers 503: no panel then.
  await knowledge.load().catch((e) => { if (e.status === 503) $("open-knowledge").hidden = true; else toast(e.message, true); });
  connection.open(savedPlace().conversationId || null);
}

// For the console (and the browser tests): the live connection, to look at or to drop.
window.chatAgent = { connection };

start();
