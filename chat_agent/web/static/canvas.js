// The artifact column: the current version rendered (Markdown or highlighted code), the text
// as the model writes it, edits applied as they arrive, versions, and the user's own edits.
import { request } from "./api.js";
import { highlightCode, renderMarkdown } from "./markdown.js";
import { codePointOffset, sliceCodePoints, applyChanges } from "./text.js";

const $ = (id) => document.getElementById(id);

export class Canvas {
  /** send(frame) sends on the socket; conversation() is the open conversation's id. */
  constructor({ send, conversation, toast }) {
    this.send = send;
    this.conversation = conversation;
    this.toast = toast;
    this.state = null;       // ArtifactState
    this.asked = null;       // the version select_artifact_version asked for, until it is shown
    this.live = null;        // {toolId, text} while the model writes
    this.pendingHighlight = null;
    this.view = $("artifact-view");
    $("version-select").addEventListener("change", (e) => this.select(Number(e.target.value)));
    $("version-prev").addEventListener("click", () => this.select(this.state.currentIndex - 1));
    $("version-next").addEventListener("click", () => this.select(this.state.currentIndex + 1));
    $("edit-artifact").addEventListener("click", () => this.openEditor());
    $("editor-cancel").addEventListener("click", () => this.closeEditor());
    $("editor-save").addEventListener("click", () => this.saveEdit());
  }

  get current() { return this.state ? this.state.current : null; }

  set(state) {
    this.state = state;
    this.asked = null;
    this.live = null;
    this.pendingHighlight = null;
    this.render();
  }

  /** artifact_edit: applied here when it builds on the version shown, else fetched whole. */
  async edit(frame) {
    const state = this.state;
    this.live = null;
    this.pendingHighlight = null;
    if (state && state.id === frame.artifactId && state.currentIndex === frame.baseIndex) {
      const current = { ...state.current, index: frame.index, content: applyChanges(state.current.content, frame.changes) };
      if (frame.title !== undefined) current.title = frame.title;
      if (frame.language !== undefined) current.language = frame.language;
      this.set({ ...state, currentIndex: frame.index, versionCount: frame.index, current });
      return;
    }
    const version = await request("GET", `/api/conversations/${this.conversation()}/artifact/versions/${frame.index}`);
    this.set({ id: frame.artifactId, currentIndex: frame.index, versionCount: frame.index,
      current: { index: version.index, type: version.type, title: version.title, language: version.language, content: version.content } });
  }

  /** artifact_chunk: the model's text as it writes it (for a highlight edit, the replacement). */
  chunk(frame) {
    if (!this.live || this.live.toolId !== frame.toolId) this.live = { toolId: frame.toolId, text: "" };
    this.live.text += frame.content;
    if (this.liveQueued) return;
    this.liveQueued = true;
    requestAnimationFrame(() => { this.liveQueued = false; this.render(); });
  }

  highlightSent(span) { this.pendingHighlight = span; }

  render() {
    const state = this.state;
    const current = this.current;
    $("artifact-title").textContent = this.live && !this.pendingHighlight && !current ? "Writing…" : current ? current.title : "Canvas";
    $("versions").hidden = !state;
    $("edit-artifact").disabled = !state || !!this.live;
    $("export-button").disabled = !state;
    $("quick-actions").hidden = !state;
    document.querySelector('#export-menu [data-format="code"]').hidden = !current || current.type !== "code";
    if (state) this.renderVersions();
    this.view.classList.toggle("writing", !!this.live);
    if (this.live) { this.renderLive(); return; }
    if (!current) { this.view.innerHTML = '<div class="empty"><p>The artifact appears here.</p></div>'; return; }
    this.view.replaceChildren(this.body(current.type, current.content, current.language));
    this.view.dataset.index = current.index;
  }

  body(type, content, language) {
    if (type === "code") {
      const pre = document.createElement("pre");
      pre.className = "code hljs";
      pre.innerHTML = highlightCode(content, language);
      return pre;
    }
    const doc = document.createElement("div");
    doc.className = "doc";
    doc.innerHTML = renderMarkdown(content);
    return doc;
  }

  renderLive() {
    const note = document.createElement("div");
    note.className = "writing-note";
    note.innerHTML = '<span class="spinner"></span><span>Writing…</span>';
    const current = this.current;
    const span = this.pendingHighlight;
    let node;
    if (span && current) {
      // A highlight edit streams only the replacement: show it in place of the selection.
      const before = sliceCodePoints(current.content, 0, span.start);
      const after = sliceCodePoints(current.content, span.end);
      const pre = document.createElement(current.type === "code" ? "pre" : "div");
      pre.className = current.type === "code" ? "code" : "doc";
      pre.style.whiteSpace = "pre-wrap";
      const mark = document.createElement("mark");
      mark.className = "live";
      mark.textContent = this.live.text;
      pre.append(before, mark, after);
      node = pre;
    } else {
      node = this.body(current ? current.type : "text", this.live.text, current?.language);
    }
    this.view.replaceChildren(note, node);
    this.view.scrollTop = this.view.scrollHeight;
  }

  renderVersions() {
    const { currentIndex, versionCount } = this.state;
    const select = $("version-select");
    if (select.options.length !== versionCount) {
      select.replaceChildren(...Array.from({ length: versionCount }, (_, i) => new Option(`v${i + 1} of ${versionCount}`, i + 1)));
    }
    select.value = String(currentIndex);
    $("version-prev").disabled = currentIndex <= 1;
    $("version-next").disabled = currentIndex >= versionCount;
  }

  /** Asks the server to show version `index`. Compared with the version asked for last while
   * its answer is on its way: picking v1 and then the shown v2 back must ask for v2 again. */
  select(index) {
    if (!this.state || index < 1 || index > this.state.versionCount) return;
    if (index === (this.asked ?? this.state.currentIndex)) return;
    this.asked = index === this.state.currentIndex ? null : index;
    this.send({ type: "select_artifact_version", index });
  }

  openEditor() {
    const current = this.current;
    if (!current) return;
    $("editor-title").value = current.title;
    $("editor-content").value = current.content;
    $("artifact-view").hidden = true;
    $("artifact-editor").hidden = false;
    $("editor-content").focus();
  }

  closeEditor() {
    $("artifact-editor").hidden = true;
    $("artifact-view").hidden = false;
  }

  saveEdit() {
    const content = $("editor-content").value;
    const title = $("editor-title").value.trim();
    if (!content.trim()) { this.toast("The artifact cannot be empty.", true); return; }
    const frame = { type: "edit_artifact", content };
    if (title && title !== this.current.title) frame.title = title;
    if (this.send(frame)) this.closeEditor();
  }

  /** The selection in the rendered view as code-point offsets into the current version. */
  selection() {
    const current = this.current;
    const selection = window.getSelection();
    if (!current || this.live || !selection || selection.isCollapsed) return null;
    if (!this.view.contains(selection.anchorNode) || !this.view.contains(selection.focusNode)) return null;
    const picked = selection.toString();
    if (!picked.trim()) return null;
    const range = selection.getRangeAt(0);
    const before = document.createRange();
    before.selectNodeContents(this.view.firstElementChild || this.view);
    before.setEnd(range.startContainer, range.startOffset);
    const fraction = before.toString().length / Math.max(1, (this.view.textContent || "").length);
    const found = locate(current.content, picked, fraction);
    if (!found) return null;
    const start = codePointOffset(current.content, found.start);
    const end = codePointOffset(current.content, found.end);
    // `shown`: the text as rendered, for the user to read; `selectedText` the Markdown it stands for
    return { start, end, selectedText: current.content.slice(found.start, found.end), shown: picked.trim(),
      rect: range.getBoundingClientRect() };
  }
}

/** Where the rendered text `picked` is in the Markdown `source` (UTF-16 indices): markup
 * characters and runs of whitespace are skipped on both sides; of several matches the one
 * nearest to where the selection sits in the view wins. */
export function locate(source, picked, fraction = 0) {
  const skip = /[*_`~#>\[\]|\\]/;
  const plain = [];
  const map = [];
  let space = false;
  for (let i = 0; i < source.length; i++) {
    const c = source[i];
    if (skip.test(c)) continue;
    if (/\s/.test(c)) { if (!space && plain.length) { plain.push(" "); map.push(i); } space = true; continue; }
    space = false;
    plain.push(c); map.push(i);
  }
  const needle = picked.replace(/[*_`~#>\[\]|\\]/g, "").replace(/\s+/g, " ").trim();
  if (!needle) return null;
  const hay = plain.join("");
  const hits = [];
  for (let at = hay.indexOf(needle); at >= 0; at = hay.indexOf(needle, at + 1)) hits.push(at);
  if (!hits.length) return null;
  const target = fraction * hay.length;
  const at = hits.reduce((a, b) => (Math.abs(b - target) < Math.abs(a - target) ? b : a));
  return { start: map[at], end: map[at + needle.length - 1] + 1 };
}
