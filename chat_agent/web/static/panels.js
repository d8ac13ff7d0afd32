// The side panels: the conversation list (paged with `nextCursor`, searched, renamed, each row's
// replying dot), memories and custom quick actions, each over its HTTP route.
import { request } from "./api.js";

const $ = (id) => document.getElementById(id);
const PAGE = 20;

const SEARCH_DELAY_MS = 250;
const POLL_MS = 4000;  // how often a conversation replying in the background is looked at
// PROTOCOL 1.2 "Live status" states, as the row's dot says them
const STATES = { waiting_model: "waiting for the model", retrying: "retrying", store_unavailable: "not saved yet",
  resuming: "resuming" };

export class Conversations {
  /** open(id) opens a conversation; current() is the open one's id. */
  constructor({ open, current, toast }) {
    this.openConversation = open;
    this.current = current;
    this.toast = toast;
    this.cursor = null;
    this.query = "";
    this.list = $("conversation-list");
    this.polls = new Map();  // id -> timer, for rows replying that are not the open conversation
    $("more-conversations").addEventListener("click", () => this.load(false).catch((e) => toast(e.message, true)));
    let timer = null;
    $("conversation-search").addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => this.search($("conversation-search").value), SEARCH_DELAY_MS);
    });
  }

  async load(fresh = true) {
    const query = new URLSearchParams({ limit: String(PAGE) });
    if (this.query) query.set("q", this.query);
    if (!fresh && this.cursor) query.set("cursor", this.cursor);
    const page = await request("GET", `/api/conversations?${query}`);
    if (fresh) { this.list.replaceChildren(); this.stopPolls(); }
    for (const item of page.conversations) this.add(item);
    this.cursor = page.nextCursor;
    $("more-conversations").hidden = !this.cursor;
    $("no-conversations").hidden = !(this.query && !this.list.children.length);
    this.mark();
  }

  /** PROTOCOL 1.2 search (`?q=`): titles and message text; an empty box lists them all again. */
  async search(text) {
    const words = text.trim();
    if (words === this.query) return;
    this.query = words;
    try { await this.load(); } catch (error) { this.toast(error.message, true); }
  }

  row(id) { return this.list.querySelector(`li[data-id="${CSS.escape(id)}"]`); }

  add(item) {
    const li = document.createElement("li");
    li.dataset.id = item.id;
    const title = item.title || "Untitled conversation";
    const open = Object.assign(document.createElement("button"), { className: "open", title: new Date(item.updatedAt * 1000).toLocaleString() });
    open.append(Object.assign(document.createElement("span"), { className: "title", textContent: title }));
    open.addEventListener("click", () => this.openConversation(item.id));
    const rename = Object.assign(document.createElement("button"), { className: "row-action rename", textContent: "✎" });
    rename.addEventListener("click", () => this.startRename(li));
    const remove = Object.assign(document.createElement("button"), { className: "row-action delete", textContent: "✕" });
    remove.addEventListener("click", () => this.remove(item.id));
    li.append(open, rename, remove);
    if (item.match?.snippet) li.append(Object.assign(document.createElement("div"), { className: "snippet", textContent: item.match.snippet }));
    this.name(li, title);
    this.list.append(li);
    this.running(item.id, !!item.running);
  }

  /** A row's title, and its buttons' accessible names that say which conversation they act on. */
  name(li, title) {
    li.querySelector(".title").textContent = title;
    li.querySelector(".rename").setAttribute("aria-label", `Rename “${title}”`);
    li.querySelector(".delete").setAttribute("aria-label", `Delete “${title}”`);
  }

  /** The replying dot: on while a turn runs, off when it ends (for the open conversation the
   * page says so; any other is looked at until it ends). */
  running(id, on, state = null) {
    const li = this.row(id);
    if (!li) return;
    let dot = li.querySelector(".live");
    if (!on) {
      dot?.remove();
      clearTimeout(this.polls.get(id));
      this.polls.delete(id);
      return;
    }
    if (!dot) {
      dot = Object.assign(document.createElement("span"), { className: "live", role: "img" });
      li.querySelector(".open").append(dot);
    }
    const said = STATES[state] || "replying";
    dot.className = "live" + (state ? " " + state : "");
    dot.setAttribute("aria-label", said);
    dot.title = said;
    if (id !== this.current() && !this.polls.has(id)) this.poll(id);
  }

  /** PROTOCOL 1.2 "Live status" of the open conversation's turn, on its row. */
  status(frame) {
    const id = this.current();
    if (id) this.running(id, true, frame.state);
  }

  poll(id) {
    this.polls.set(id, setTimeout(async () => {
      this.polls.delete(id);
      if (!this.row(id)) return;
      if (id === this.current()) return;  // the page follows it itself now
      try {
        const found = await request("GET", `/api/conversations/${encodeURIComponent(id)}`);
        this.running(id, !!found.running);
      } catch (error) {
        if (error.status === 404) this.row(id)?.remove(); else this.poll(id);
      }
    }, POLL_MS));
  }

  stopPolls() {
    for (const timer of this.polls.values()) clearTimeout(timer);
    this.polls.clear();
  }

  /** The open conversation: highlighted, and listed first when it is new. */
  mark(title) {
    const id = this.current();
    let found = false;
    for (const li of this.list.children) {
      const current = li.dataset.id === id;
      li.classList.toggle("current", current);
      const open = li.querySelector(".open");
      if (current) open?.setAttribute("aria-current", "page"); else open?.removeAttribute("aria-current");
      if (current) {
        found = true;
        if (title) this.name(li, title);
      }
    }
    if (!found && id && title && !this.query) {
      this.add({ id, title, updatedAt: Date.now() / 1000 });
      this.list.prepend(this.list.lastElementChild);
      this.mark();
    }
  }

  /** PROTOCOL 1.2 rename: the title edited in place; Enter saves, Escape leaves it as it was. */
  startRename(li) {
    if (li.querySelector(".rename-input")) return;
    const open = li.querySelector(".open");
    const before = li.querySelector(".title").textContent;
    const input = Object.assign(document.createElement("input"), { className: "rename-input", value: before, maxLength: 200 });
    input.setAttribute("aria-label", "New title");
    open.hidden = true;
    li.prepend(input);
    input.focus();
    input.select();
    let done = false;
    const finish = async (save) => {
      if (done) return;
      done = true;
      const title = input.value.trim();
      input.remove();
      open.hidden = false;
      open.focus();
      if (!save || !title || title === before) return;
      try {
        const renamed = await request("PATCH", `/api/conversations/${encodeURIComponent(li.dataset.id)}`, { title });
        this.name(li, renamed.title);
      } catch (error) { this.toast(error.message, true); }
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") { e.preventDefault(); finish(true); }
      if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); finish(false); }
    });
    input.addEventListener("blur", () => finish(true));
  }

  async remove(id) {
    if (!confirm("Delete this conversation and its artifact?")) return;
    try {
      await request("DELETE", `/api/conversations/${encodeURIComponent(id)}`);
      this.row(id)?.remove();
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
