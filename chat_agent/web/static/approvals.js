// Tool approval (PROTOCOL 1.1 "Tool approval"): a card per `approval_request` (and per entry
// of `session.pendingApprovals` after a reconnect) that answers with `approve`. Kept apart so
// that it can be read and checked on its own.
import { escapeHtml } from "./markdown.js";

export class Approvals {
  /** send(frame) -> bool; cardFor(toolId) -> the tool's card element or null; host: where cards go otherwise */
  constructor({ send, cardFor, host }) {
    this.send = send;
    this.cardFor = cardFor;
    this.host = host;
    this.open = new Map();  // toolId -> approval element
  }

  /** session.pendingApprovals: the requests still waiting for an answer. */
  restore(pending) {
    this.clear();
    for (const request of pending || []) this.request(request);
  }

  clear() {
    for (const node of this.open.values()) node.remove();
    this.open.clear();
  }

  request(frame) {
    if (this.open.has(frame.toolId)) return;
    const node = document.createElement("div");
    node.className = "approval";
    node.dataset.toolId = frame.toolId;
    node.innerHTML = `<h2>Allow <code>${escapeHtml(frame.name)}</code> to run?</h2>
      <pre></pre>
      <input class="approval-message" placeholder="Optional note for the assistant (why not, what instead)">
      <div class="row"><button type="button" class="danger decline">Decline</button>
      <button type="button" class="primary approve">Approve</button></div>`;
    node.querySelector("pre").textContent = JSON.stringify(frame.input ?? {}, null, 2);
    node.querySelector(".approve").addEventListener("click", () => this.answer(frame.toolId, true));
    node.querySelector(".decline").addEventListener("click", () => this.answer(frame.toolId, false));
    const card = this.cardFor(frame.toolId);
    if (card) {
      card.classList.add("waiting");
      card.querySelector(".badge").textContent = "needs approval";
      card.after(node);
    } else {
      this.host().append(node);
    }
    this.open.set(frame.toolId, node);
    node.scrollIntoView({ block: "nearest" });
  }

  answer(toolId, approved) {
    const node = this.open.get(toolId);
    if (!node) return;
    const message = node.querySelector(".approval-message").value.trim();
    const frame = { type: "approve", toolId, approved };
    if (message) frame.message = message;
    if (!this.send(frame)) return;  // not connected: the card stays, to answer after reconnecting
    this.resolve(toolId);
    const card = this.cardFor(toolId);
    if (card && approved) {
      card.classList.remove("waiting");
      card.querySelector(".badge").textContent = "approved";
    }
  }

  /** The call ended (tool_end) or was answered: its card goes. */
  resolve(toolId) {
    const node = this.open.get(toolId);
    if (node) node.remove();
    this.open.delete(toolId);
  }
}
