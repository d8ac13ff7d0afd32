// The side panels: the conversation list (paged with `nextCursor`), memories and custom quick
// actions, each over its HTTP route.
import { request } from "./api.js";

const $ = (id) => document.getElementById(id);
const PAGE = 20;

export class Conversations {
  /** open(id) opens a conversation; current() is the open one's id. */
  constructor({ open, current, toast }) {
    this.openConversation = open;
    this.current = current;
    this.toast = toast;
    this.cursor = null;
    this.list = $("conversation-list");
    $("more-conversations").addEventListener("click", () => this.load(false));
  }

  async load(fresh = true) {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (!fresh && this.cursor) query.set("cursor", this.cursor);
    const page = await request("GET", `/api/conversations?${query}`);
    if (fresh) this.list.replaceChildren();
    for (const item of page.conversations) this.add(item);
    this.cursor = page.nextCursor;
    $("more-conversations").hidden = !this.cursor;
    this.mark();
  }

  add(item) {
    const li = document.createElement("li");
    li.dataset.id = item.id;
    const open = document.createElement("button");
    open.textContent = item.title || "Untitled conversation";
    open.title = new Date(item.updatedAt * 1000).toLocaleString();
    open.addEventListener("click", () => this.openConversation(item.id));
    const remove = document.createElement("button");
    remove.className = "delete";
    remove.title = "Delete";
    remove.textContent = "✕";
    remove.addEventListener("click", () => this.remove(item.id));
    if (item.running) li.prepend(Object.assign(document.createElement("span"), { className: "live", title: "replying" }));
    li.append(open, remove);
    this.list.append(li);
  }

  /** The open conversation: highlighted, and listed first when it is new. */
  mark(title) {
    const id = this.current();
    let found = false;
    for (const li of this.list.children) {
      li.classList.toggle("current", li.dataset.id === id);
      if (li.dataset.id === id) {
        found = true;
        if (title) li.querySelector("button").textContent = title;
      }
    }
    if (!found && id && title) {
      this.add({ id, title, updatedAt: Date.now() / 1000 });
      this.list.prepend(this.list.lastElementChild);
      this.mark();
    }
  }

  async remove(id) {
    if (!confirm("Delete this conversation and its artifact?")) return;
    try {
      await request("DELETE", `/api/conversations/${id}`);
      this.list.querySelector(`li[data-id="${CSS.escape(id)}"]`)?.remove();
      if (id === this.current()) this.openConversation(null);
    } catch (error) { this.toast(error.message, true); }
  }
}

const lines = (text) => text.split("\n").map((l) => l.trim()).filter(Boolean);

export function memoriesPanel(toast) {
  const dialog = $("memories-dialog");
  $("open-memories").addEventListener("click", async () => {
    try {
      const memories = await request("GET", "/api/memories");
      $("memories-style").value = memories.styleRules.join("\n");
      $("memories-content").value = memories.content.join("\n");
      dialog.showModal();
    } catch (error) { toast(error.message, true); }
  });
  $("memories-save").addEventListener("click", async (event) => {
    event.preventDefault();
    try {
      await request("PUT", "/api/memories", { styleRules: lines($("memories-style").value), content: lines($("memories-content").value) });
      dialog.close();
      toast("Memories saved.");
    } catch (error) { toast(error.message, true); }
  });
  $("memories-clear").addEventListener("click", async () => {
    if (!confirm("Forget every memory?")) return;
    try {
      await request("DELETE", "/api/memories");
      dialog.close();
      toast("Memories forgotten.");
    } catch (error) { toast(error.message, true); }
  });
}

export class CustomActions {
  /** changed(actions) is told the list after every load or change. */
  constructor({ toast, changed }) {
    this.toast = toast;
    this.changed = changed;
    this.actions = [];
    this.dialog = $("actions-dialog");
    $("open-actions").addEventListener("click", () => { this.reset(); this.renderList(); this.dialog.showModal(); });
    $("action-reset").addEventListener("click", () => this.reset());
    $("action-save").addEventListener("click", () => this.save());
  }

  async load() {
    this.actions = (await request("GET", "/api/quick-actions")).quickActions;
    this.changed(this.actions);
    this.renderList();
  }

  renderList() {
    const list = $("actions-list");
    list.replaceChildren();
    for (const action of this.actions) {
      const li = document.createElement("li");
      const name = document.createElement("span");
      name.textContent = action.title;
      const edit = Object.assign(document.createElement("button"), { type: "button", className: "ghost small", textContent: "Edit" });
      edit.addEventListener("click", () => this.fill(action));
      const remove = Object.assign(document.createElement("button"), { type: "button", className: "ghost small", textContent: "Delete" });
      remove.addEventListener("click", () => this.remove(action));
      li.append(name, edit, remove);
      list.append(li);
    }
    if (!this.actions.length) list.innerHTML = "<li><span>No custom actions yet.</span></li>";
  }

  fill(action) {
    $("action-id").value = action.id;
    $("action-title").value = action.title;
    $("action-prompt").value = action.prompt;
    $("action-reflections").checked = action.includeReflections;
    $("action-prefix").checked = action.includePrefix;
    $("action-history").checked = action.includeRecentHistory;
  }

  reset() { this.fill({ id: "", title: "", prompt: "", includeReflections: true, includePrefix: true, includeRecentHistory: true }); }

  async save() {
    const body = { title: $("action-title").value, prompt: $("action-prompt").value,
      includeReflections: $("action-reflections").checked, includePrefix: $("action-prefix").checked,
      includeRecentHistory: $("action-history").checked };
    const id = $("action-id").value;
    try {
      await request(id ? "PUT" : "POST", id ? `/api/quick-actions/${id}` : "/api/quick-actions", body);
      this.reset();
      await this.load();
      this.toast("Quick action saved.");
    } catch (error) { this.toast(error.message, true); }
  }

  async remove(action) {
    try {
      await request("DELETE", `/api/quick-actions/${action.id}`);
      await this.load();
    } catch (error) { this.toast(error.message, true); }
  }
}
