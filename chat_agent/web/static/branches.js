// Each message's own controls (PROTOCOL 1.2 "Conversations are trees"): a reply's copy and
// regenerate buttons, a user message's edit and resend, and `‹ 2/3 ›` to move between the
// siblings of a message that has any (`switch_branch`). Siblings come from the conversation's
// tree (GET …/tree): a message only knows its place among them, not their ids.
import { request } from "./api.js";

function button(className, label, onClick) {
  const node = Object.assign(document.createElement("button"), { type: "button", className: `icon ${className}`, title: label });
  node.setAttribute("aria-label", label);
  node.addEventListener("click", onClick);
  return node;
}

/** The text on the clipboard: the Clipboard API where the page is a secure context, else the
 * older copy command on a hidden text area (a page served over plain HTTP on a LAN address). */
async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) { await navigator.clipboard.writeText(text); return; }
  const area = Object.assign(document.createElement("textarea"), { value: text, readOnly: true });
  area.style.cssText = "position:fixed;opacity:0";
  document.body.append(area);
  area.select();
  const done = document.execCommand("copy");
  area.remove();
  if (!done) throw new Error("The browser did not allow copying.");
}

export class Branches {
  /** conversation() -> id; send(frame) -> bool; running() -> bool; regenerate(messageId);
   * resend(messageId, content, {attachments, previews}) -> bool; toast(text, isError) */
  constructor({ conversation, send, running, regenerate, resend, toast }) {
    Object.assign(this, { conversation, send, running, regenerate, resend, toast });
  }

  /** The controls of one message node; again when its id or branch place becomes known. */
  attach(node, { id, role, branch, text }) {
    node.querySelector(":scope > .message-actions")?.remove();
    if (node.classList.contains("editing")) return;
    if (id) node.dataset.id = id;
    if (branch) Object.assign(node.dataset, { branchIndex: branch.index, branchCount: branch.count });
    const bar = Object.assign(document.createElement("div"), { className: "message-actions" });
    const index = Number(node.dataset.branchIndex || 1);
    const count = Number(node.dataset.branchCount || 1);
    if (count > 1 && id) {
      const nav = Object.assign(document.createElement("span"), { className: "branch-nav" });
      const prev = button("branch-prev", `Previous version (${index - 1} of ${count})`, () => this.step(node, -1));
      const next = button("branch-next", `Next version (${index + 1} of ${count})`, () => this.step(node, 1));
      prev.disabled = index <= 1;
      next.disabled = index >= count;
      const place = Object.assign(document.createElement("span"), { className: "branch-place", textContent: `${index}/${count}` });
      nav.append(prev, place, next);
      bar.append(nav);
    }
    if (role === "assistant") {
      bar.append(button("copy", "Copy the reply", (e) => this.copy(e.currentTarget, text())));
      if (id) bar.append(button("regenerate", "Regenerate the reply", () => this.whenIdle(() => this.regenerate(id))));
    } else if (role === "user" && id) {
      bar.append(button("edit", "Edit and resend", () => this.whenIdle(() => this.edit(node))));
    }
    if (bar.childElementCount) node.append(bar);
  }

  whenIdle(action) {
    if (this.running()) { this.toast("Wait for the reply, or stop it.", true); return; }
    action();
  }

  async copy(node, text) {
    try {
      await copyText(text);
      node.classList.add("copied");
      node.setAttribute("aria-label", "Copied");
      setTimeout(() => { node.classList.remove("copied"); node.setAttribute("aria-label", "Copy the reply"); }, 1500);
      this.toast("Copied the reply.");
    } catch (e) { this.toast(`Could not copy: ${e.message}`, true); }
  }

  /** The user message in place becomes a text box: sent, it is a new sibling (`editOf`). */
  edit(node) {
    const words = node.querySelector(".user-text");
    const form = Object.assign(document.createElement("form"), { className: "edit-form" });
    const box = Object.assign(document.createElement("textarea"), { value: words.textContent, rows: 3 });
    box.setAttribute("aria-label", "Your message, edited");
    const cancel = Object.assign(document.createElement("button"), { type: "button", className: "ghost small", textContent: "Cancel" });
    const save = Object.assign(document.createElement("button"), { type: "submit", className: "small", textContent: "Send" });
    const row = Object.assign(document.createElement("div"), { className: "row" });
    const kept = node.resend?.attachments.length || 0;
    if (kept) row.append(Object.assign(document.createElement("span"), { className: "edit-note",
      textContent: `Sent again with its ${kept === 1 ? "attachment" : `${kept} attachments`}` }));
    row.append(cancel, save);
    form.append(box, row);
    const close = () => { form.remove(); words.hidden = false; node.classList.remove("editing"); this.refreshNode(node); };
    cancel.addEventListener("click", close);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const content = box.value.trim();
      if (!content) { this.toast("Write a message first.", true); return; }
      if (this.resend(node.dataset.id, content, node.resend)) close();
    });
    box.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
      if (e.key === "Escape") close();
    });
    node.querySelector(":scope > .message-actions")?.remove();
    node.classList.add("editing");
    words.hidden = true;
    node.append(form);
    box.focus();
  }

  refreshNode(node) {
    this.attach(node, { id: node.dataset.id, role: node.dataset.role, text: () => "" });
  }

  /** {messages, leafId}: every message of every branch, in the order they were written. */
  async fetchTree() {
    const id = this.conversation();
    return id ? request("GET", `/api/conversations/${id}/tree`) : null;
  }

  siblings(tree, id) {
    const me = tree.messages.find((m) => m.id === id);
    return me ? tree.messages.filter((m) => m.parentId === me.parentId && m.role === me.role) : [];
  }

  /** ‹ or ›: the path through the sibling before or after this message. */
  step(node, delta) {
    this.whenIdle(async () => {
      try {
        const tree = await this.fetchTree();
        const siblings = this.siblings(tree, node.dataset.id);
        const at = siblings.findIndex((m) => m.id === node.dataset.id);
        const target = siblings[at + delta];
        if (target) this.send({ type: "switch_branch", messageId: target.id });
      } catch (e) { this.toast(e.message, true); }
    });
  }

  /** After a turn: the shown messages get the ids and branch places the tree gives them (the
   * user's own message was shown before the server named it; a regenerated reply is a new
   * sibling). The shown nodes are the end of the active path, matched from the newest. */
  async refresh(shown, texts) {
    let tree;
    try { tree = await this.fetchTree(); } catch { return; }  // a conversation not stored yet
    if (!tree) return;
    const byId = new Map(tree.messages.map((m) => [m.id, m]));
    const path = [];
    for (let at = byId.get(tree.leafId); at; at = byId.get(at.parentId)) path.unshift(at);
    for (let i = shown.length - 1, j = path.length - 1; i >= 0 && j >= 0; i--, j--) {
      const node = shown[i];
      const message = path[j];
      if (node.dataset.role !== message.role || (node.dataset.id && node.dataset.id !== message.id)) break;
      const siblings = this.siblings(tree, message.id);
      const branch = { index: siblings.findIndex((m) => m.id === message.id) + 1, count: siblings.length };
      this.attach(node, { id: message.id, role: message.role, branch, text: () => texts(node) });
    }
  }
}
