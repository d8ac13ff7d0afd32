// The canvas page: wires the socket's frames to the chat, the canvas and the side panels.
import { auth, download, request, HttpError } from "./api.js";
import { Approvals } from "./approvals.js";
import { Branches } from "./branches.js";
import { Canvas } from "./canvas.js";
import { Chat } from "./chat.js";
import { Composer } from "./composer.js";
import { Connection } from "./connection.js";
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
  onGone: () => { toast("That conversation no longer exists.", true); openConversation(null, "replace"); },
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

/** The open conversation's turn runs or not; `row`: its row in the list says so too. */
function setRunning(on, row = true) {
  running = on;
  $("stop").hidden = !on;
  $("send").disabled = on;
  if (row && connection.conversationId) conversations.running(connection.conversationId, on);
}

function setTitle(title) {
  $("conversation-title").textContent = title || "New conversation";
  $("conversation-title").title = title || "";  // the whole of it, should the bar still cut it
  document.title = (title ? title + " · " : "") + "Canvas";
}

// ---- URLs: /c/{conversationId} is a conversation, / a new one ----------------------------------
const PATH = /^\/c\/([^/]+)\/?$/;

function pathConversation() {
  const found = PATH.exec(location.pathname);
  return found ? decodeURIComponent(found[1]) : null;
}

/** Puts the conversation in the address bar: "push" for a move the Back button undoes,
 * "replace" when it is the same place under its lasting name. */
function address(id, how) {
  const url = id ? `/c/${encodeURIComponent(id)}` : "/";
  if (location.pathname === url) return;
  if (how === "push") history.pushState({ conversationId: id }, "", url);
  else history.replaceState({ conversationId: id }, "", url);
}

window.addEventListener("popstate", () => {
  const id = pathConversation();
  if (id !== connection.conversationId) openConversation(id, "none");
});

// ---- narrow screens: the chat and the canvas as tabs, the conversation list as a drawer -------
const narrow = matchMedia("(max-width: 980px)");

function showTab(name) {
  $("workspace").dataset.tab = name;
  for (const tab of ["chat", "canvas"]) {
    const node = $(`tab-${tab}`);
    node.setAttribute("aria-selected", String(tab === name));
    node.tabIndex = tab === name ? 0 : -1;
  }
  if (name === "canvas") $("tab-canvas").classList.remove("unseen");
}

/** The canvas changed: on a narrow screen showing the chat, its tab says so. */
function canvasChanged() {
  if (narrow.matches && $("workspace").dataset.tab !== "canvas") $("tab-canvas").classList.add("unseen");
}

for (const tab of ["chat", "canvas"]) $(`tab-${tab}`).addEventListener("click", () => showTab(tab));
$("workspace").querySelector("[role=tablist]").addEventListener("keydown", (event) => {
  if (!["ArrowLeft", "ArrowRight", "Home", "End"].includes(event.key)) return;
  const next = $("workspace").dataset.tab === "chat" ? "canvas" : "chat";
  const name = event.key === "Home" ? "chat" : event.key === "End" ? "canvas" : next;
  showTab(name);
  $(`tab-${name}`).focus();
  event.preventDefault();
});

function drawer(open) {
  const app = $("app");
  if (app.classList.contains("drawer-open") === open) return;
  app.classList.toggle("drawer-open", open);
  $("open-drawer").setAttribute("aria-expanded", String(open));
  $("workspace").inert = open;  // a modal drawer: Tab stays in it
  if (open) $("new-conversation").focus();
  else if (narrow.matches) $("open-drawer").focus();
}
$("open-drawer").addEventListener("click", () => drawer(true));
$("close-drawer").addEventListener("click", () => drawer(false));
$("drawer-backdrop").addEventListener("click", () => drawer(false));
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && $("app").classList.contains("drawer-open")) drawer(false);
});
narrow.addEventListener("change", () => { if (!narrow.matches) drawer(false); });

$("skip-link").addEventListener("click", (event) => {
  event.preventDefault();
  drawer(false);
  showTab("chat");
  $("prompt").focus();
});

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
function showHistory(frame) {
  const messages = frame.messages || [];  // for an edit: the path up to the edited message's parent
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
  // Opened by another name (an AG-UI thread's) or moved on: the address says where we are.
  if (pathConversation() || (frame.messages || []).length) address(frame.conversationId, "replace");
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
    case "artifact_chunk": canvas.chunk(frame); canvasChanged(); break;
    case "artifact": canvas.set(frame.artifact); quickBar(); canvasChanged(); if (!running) userEdits.sync(); break;
    case "artifact_edit": canvas.edit(frame).then(() => { quickBar(); if (!running) userEdits.sync(); }, (e) => toast(e.message, true)); canvasChanged(); break;
    case "history": showHistory(frame); break;
    case "status": conversations.status(frame); break;
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
  // A new conversation is stored with its first message: from now on it has an address.
  address(connection.conversationId, "replace");
  if (!conversations.row(connection.conversationId)) conversations.mark($("conversation-title").title || "New conversation");
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
/** After a selection ends (mouse, touch or Shift+arrows): the box to ask for a change, next to
 * the selection without covering it, quoting the text as the reader sees it. */
function selectionEnded(event) {
  if ($("highlight-box").contains(event.target)) return;
  setTimeout(() => {
    const picked = canvas.selection();
    const box = $("highlight-box");
    if (!picked || running) { box.hidden = true; span = null; return; }
    span = picked;
    $("highlight-quote").textContent = picked.shown;
    $("highlight-input").value = "";
    box.hidden = false;
    const area = $("canvas").getBoundingClientRect();
    const { offsetWidth: width, offsetHeight: height } = box;
    const gap = 8;
    let top = picked.rect.bottom - area.top + gap;  // below the selection ...
    if (top + height > area.height - gap) top = picked.rect.top - area.top - height - gap;  // ... or above it
    if (top < gap) top = Math.min(area.height - height - gap, picked.rect.bottom - area.top + gap);
    box.style.left = `${Math.max(gap, Math.min(area.width - width - gap, picked.rect.left - area.left))}px`;
    box.style.top = `${Math.max(gap, top)}px`;
    $("highlight-input").focus({ preventScroll: true });
  });
}
document.addEventListener("mouseup", selectionEnded);
document.addEventListener("touchend", selectionEnded);
$("artifact-view").addEventListener("keyup", (event) => { if (event.shiftKey) selectionEnded(event); });
$("highlight-box").addEventListener("submit", (event) => {
  event.preventDefault();
  const ask = $("highlight-input").value.trim();
  if (!span || !ask) return;
  const { start, end, selectedText, shown } = span;
  if (sendMessage({ content: ask, canvas: { highlight: { start, end, selectedText } } }, `Edit “${shown.slice(0, 80)}”: ${ask}`)) {
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
function exportMenu(open) {
  $("export-menu").hidden = !open;
  $("export-button").setAttribute("aria-expanded", String(open));
}
$("export-button").addEventListener("click", (e) => { e.stopPropagation(); exportMenu($("export-menu").hidden); });
document.addEventListener("click", () => exportMenu(false));
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

/** Opens a conversation (null: a new one); `how` the address bar follows ("push", "replace",
 * or "none" when it already says so: the Back button). */
function openConversation(id, how = "push") {
  if (how !== "none") address(id, how);
  drawer(false);
  $("highlight-box").hidden = true;
  $("tab-canvas").classList.remove("unseen");
  canvas.closeEditor();
  chat.reset();
  planBar.set(null);
  approvals.clear();
  reviews.clear();
  canvas.set(null);
  setTitle(null);
  const left = connection.conversationId;
  const wasRunning = running;
  setRunning(false, false);
  connection.open(id);
  // A reply goes on without us: its row keeps the dot, followed until it ends.
  if (wasRunning && left && left !== id) conversations.running(left, true);
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
  connection.open(pathConversation());
}

// For the console (and the browser tests): the live connection, to look at or to drop.
window.chatAgent = { connection };

start();
