// Knowledge bases (PROTOCOL 1.2 "Knowledge bases and citations"): the collections panel
// (create, upload documents, watch them index, delete), the composer's picker of the
// collections a message may search, and what a citation links to.
import { authedUrl, request, upload } from "./api.js";

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;  // while a document of an open collection is indexing

function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

export class Knowledge {
  constructor({ toast }) {
    this.toast = toast;
    this.collections = [];
    this.documents = new Map();  // documentId -> document (for citations' links)
    this.open = null;            // the collection shown in the panel
    this.chosen = new Set();     // collection ids the next messages may search
    this.timer = null;
    this.dialog = $("knowledge-dialog");
    $("open-knowledge").addEventListener("click", () => { this.load().catch((e) => toast(e.message, true)); this.dialog.showModal(); });
    this.dialog.addEventListener("close", () => this.stopPolling());
    $("knowledge-create").addEventListener("click", () => this.create());
    $("knowledge-file").addEventListener("change", (e) => { this.add([...e.target.files]); e.target.value = ""; });
  }

  async load() {
    this.collections = (await request("GET", "/api/knowledge")).collections;
    const known = new Set(this.collections.map((c) => c.id));
    for (const id of [...this.chosen]) if (!known.has(id)) this.chosen.delete(id);
    if (this.open && !known.has(this.open)) this.open = null;
    await Promise.all(this.collections.map((c) => this.loadDocuments(c.id)));
    this.render();
  }

  async loadDocuments(collectionId) {
    const { documents } = await request("GET", `/api/knowledge/${collectionId}/documents`);
    for (const doc of documents) this.documents.set(doc.documentId, doc);
    return documents;
  }

  async create() {
    const name = $("knowledge-name").value.trim();
    if (!name) { this.toast("Name the collection first.", true); return; }
    try {
      const made = await request("POST", "/api/knowledge", { name });
      $("knowledge-name").value = "";
      this.open = made.id;
      this.chosen.add(made.id);
      await this.load();
    } catch (e) { this.toast(e.message, true); }
  }

  async add(files) {
    if (!this.open) { this.toast("Open a collection first.", true); return; }
    const target = this.open;
    for (const file of files) {
      try {
        const uploaded = await upload(file, () => {});
        await request("POST", `/api/knowledge/${target}/documents`, { uploadId: uploaded.uploadId });
      } catch (e) { this.toast(`${file.name}: ${e.message}`, true); }
    }
    await this.load();
  }

  async remove(collectionId, documentId) {
    try {
      await request("DELETE", documentId ? `/api/knowledge/${collectionId}/documents/${documentId}` : `/api/knowledge/${collectionId}`);
      if (!documentId) this.chosen.delete(collectionId);
      await this.load();
    } catch (e) { this.toast(e.message, true); }
  }

  render() {
    const list = $("knowledge-list");
    list.replaceChildren();
    for (const c of this.collections) {
      const open = el("button", { type: "button", className: "link", textContent: `${c.name} (${c.documents})` });
      open.addEventListener("click", () => { this.open = c.id; this.render(); });
      const drop = el("button", { type: "button", className: "delete", title: "Delete the collection", textContent: "✕" });
      drop.addEventListener("click", () => { if (confirm(`Delete “${c.name}” and its documents?`)) this.remove(c.id); });
      list.append(el("li", { className: c.id === this.open ? "current" : "" }, open, drop));
    }
    const docs = $("knowledge-documents");
    docs.replaceChildren();
    $("knowledge-upload").hidden = !this.open;
    let indexing = false;
    for (const doc of [...this.documents.values()].filter((d) => d.collectionId === this.open)) {
      indexing ||= doc.status === "indexing";
      const status = el("span", { className: `doc-status ${doc.status}`, textContent: doc.status });
      const detail = doc.status === "failed" ? el("div", { className: "error-text", textContent: doc.error || "" }) : "";
      const drop = el("button", { type: "button", className: "delete", title: "Delete the document", textContent: "✕" });
      drop.addEventListener("click", () => this.remove(this.open, doc.documentId));
      const li = el("li", {}, el("span", { textContent: doc.filename }), status, drop, detail);
      li.dataset.documentId = doc.documentId;
      docs.append(li);
    }
    this.renderPicker();
    if (indexing && this.dialog.open) this.poll(); else this.stopPolling();
  }

  poll() {
    if (this.timer) return;
    this.timer = setTimeout(async () => {
      this.timer = null;
      for (const doc of [...this.documents.values()]) if (doc.collectionId === this.open) this.documents.delete(doc.documentId);
      try { await this.load(); } catch (e) { this.toast(e.message, true); }
    }, POLL_MS);
  }

  stopPolling() { clearTimeout(this.timer); this.timer = null; }

  /** The composer's picker: a checkbox per collection. */
  renderPicker() {
    const box = $("knowledge-picker");
    box.hidden = this.collections.length === 0;
    const options = $("knowledge-options");
    options.replaceChildren();
    for (const c of this.collections) {
      const check = el("input", { type: "checkbox", checked: this.chosen.has(c.id), value: c.id });
      check.addEventListener("change", () => { check.checked ? this.chosen.add(c.id) : this.chosen.delete(c.id); this.renderPicker(); });
      options.append(el("label", { className: "toggle" }, check, ` ${c.name}`));
    }
    $("knowledge-count").textContent = this.chosen.size ? ` (${this.chosen.size})` : "";
  }

  /** settings.knowledge for the next message. */
  selected() { return [...this.chosen]; }

  /** Where a citation's document opens: its upload, at its page for a PDF; null once deleted. */
  link(citation) {
    const doc = this.documents.get(citation.documentId);
    if (!doc) return null;
    return authedUrl(`/api/uploads/${doc.uploadId}`) + (citation.page ? `#page=${citation.page}` : "");
  }
}
