// The message box: text, the attachments (file picker and drag-and-drop, uploaded at once with
// their progress), and the turn's settings.
import { upload } from "./api.js";

const $ = (id) => document.getElementById(id);
const MODEL_KEY = "chat-agent.model";  // the model picked last, for the next visits

export class Composer {
  /** submit({content, attachments, previews, settings}) -> bool (sent) */
  constructor({ submit, toast }) {
    this.submit = submit;
    this.toast = toast;
    this.items = [];  // {file, node, uploadId?, failed?, preview?}
    this.prompt = $("prompt");
    $("composer").addEventListener("submit", (e) => { e.preventDefault(); this.send(); });
    this.prompt.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.send(); }
    });
    this.prompt.addEventListener("input", () => this.grow());
    $("opt-model").addEventListener("change", (e) => { try { localStorage.setItem(MODEL_KEY, e.target.value); } catch {} });
    $("file-input").addEventListener("change", (e) => { this.add([...e.target.files]); e.target.value = ""; });
    const zone = $("chat");
    let depth = 0;
    const show = (on) => { $("drop-hint").hidden = !on; zone.classList.toggle("dragging", on); };
    zone.addEventListener("dragenter", (e) => { if (e.dataTransfer?.types.includes("Files")) { depth++; show(true); e.preventDefault(); } });
    zone.addEventListener("dragover", (e) => { if (e.dataTransfer?.types.includes("Files")) e.preventDefault(); });
    zone.addEventListener("dragleave", () => { if (--depth <= 0) { depth = 0; show(false); } });
    zone.addEventListener("drop", (e) => { e.preventDefault(); depth = 0; show(false); this.add([...e.dataTransfer.files]); });
  }

  /** The toggles' and the model picker's `message.settings` (a regenerate's too). */
  settings() {
    const settings = { webSearch: $("opt-search").checked, thinking: $("opt-thinking").checked };
    // Unticked: the server's default (CHAT_AGENT_REVIEW). Ticked: reviewed, the user decides.
    if ($("opt-review").checked) settings.review = { enabled: true, maxRevisions: 1, decision: "ask" };
    const model = $("opt-model");
    if (!model.hidden && model.value) settings.model = model.value;
    return settings;
  }

  /** `session.models`: the models this server lets a message pick, its default first. A choice
   * made earlier stays while the server still offers it; one model or none: no picker. */
  models(models) {
    const select = $("opt-model");
    let chosen = select.value;
    try { chosen ||= localStorage.getItem(MODEL_KEY); } catch {}
    const list = Array.isArray(models) ? models : [];
    select.replaceChildren(...list.map((m, i) => new Option(i === 0 ? `${m} (default)` : m, m)));
    select.value = list.includes(chosen) ? chosen : list[0] || "";
    select.hidden = list.length < 2;
  }

  grow() {
    this.prompt.style.height = "auto";
    this.prompt.style.height = Math.min(200, this.prompt.scrollHeight) + "px";
  }

  add(files) {
    for (const file of files) {
      const item = { file, node: document.createElement("div") };
      item.node.className = "attachment";
      if (file.type.startsWith("image/")) {
        item.preview = URL.createObjectURL(file);
        item.node.append(Object.assign(document.createElement("img"), { src: item.preview, alt: "" }));
      }
      const name = Object.assign(document.createElement("span"), { textContent: file.name });
      const bar = Object.assign(document.createElement("progress"), { max: 1, value: 0 });
      const remove = Object.assign(document.createElement("button"), { type: "button", textContent: "✕", title: "Remove" });
      remove.addEventListener("click", () => { this.items = this.items.filter((i) => i !== item); item.node.remove(); });
      item.node.append(name, bar, remove);
      $("attachments").append(item.node);
      this.items.push(item);
      item.done = upload(file, (fraction) => { bar.value = fraction; }).then((result) => {
        item.uploadId = result.uploadId;
        item.mediaType = result.mediaType;
        bar.remove();
        item.node.classList.add("uploaded");
        item.node.dataset.uploadId = result.uploadId;
      }, (error) => {
        item.failed = true;
        item.node.classList.add("failed");
        bar.remove();
        name.textContent = `${file.name}: ${error.message}`;
      });
    }
  }

  async send() {
    const content = this.prompt.value.trim();
    if (!content) { if (this.items.length) this.toast("Write a message to go with the files.", true); return; }
    await Promise.all(this.items.map((i) => i.done));
    const ready = this.items.filter((i) => i.uploadId);
    if (this.items.some((i) => i.failed)) { this.toast("Remove the files that failed to upload first.", true); return; }
    const attachments = ready.map((i) => ({ type: (i.mediaType || "").startsWith("image/") ? "image" : "document", uploadId: i.uploadId }));
    const previews = ready.map((i) => ({ kind: (i.mediaType || "").startsWith("image/") ? "image" : "document", preview: i.preview, filename: i.file.name }));
    if (!this.submit({ content, attachments, previews, settings: this.settings() })) return;
    this.prompt.value = "";
    this.grow();
    this.items = [];
    $("attachments").replaceChildren();
  }
}
