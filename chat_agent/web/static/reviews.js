// Review (PROTOCOL 1.2 "Review"): a card per `review` in its reply (score, feedback,
// suggestions), and, for a `review_request` (or an entry of `session.pendingReviews` after a
// reconnect), the decision buttons that answer with `review_decision`. Kept apart, as the
// approvals are, so that it can be read and checked on its own.
import { escapeHtml } from "./markdown.js";

const REASONS = { timed_out: "accepted: no answer in time", aborted: "accepted: the turn was stopped",
  interrupted: "accepted: the server stopped during this reply" };

/** The card of one review, for a reply's node. */
export function reviewCard(review) {
  const node = document.createElement("div");
  node.className = "review " + (review.passed ? "passed" : "failed");
  node.dataset.reviewId = review.reviewId;
  const what = review.target?.kind === "image" ? "image" : `version ${review.target?.index}`;
  const revision = review.revision ? ` · revision ${review.revision}` : "";
  node.innerHTML = `<div class="review-head"><span class="review-verdict">${review.passed ? "Review passed" : "Review failed"}</span>
    <span class="review-score">${Math.round(Number(review.score) * 100)}%</span>
    <span class="review-what">${escapeHtml(what)}${revision}</span></div>
    <div class="review-feedback"></div><ul class="review-suggestions"></ul><div class="review-decision"></div>`;
  node.querySelector(".review-feedback").textContent = review.feedback || "";
  const list = node.querySelector(".review-suggestions");
  for (const s of review.suggestions || []) list.append(Object.assign(document.createElement("li"), { textContent: s }));
  if (review.decision) decided(node, review.decision, null);
  return node;
}

function decided(node, decision, reason) {
  const line = node.querySelector(".review-decision");
  line.textContent = reason ? REASONS[reason] || decision : decision === "revise" ? "You asked for a revision." : "You accepted it.";
  node.dataset.decision = decision;
}

export class Reviews {
  /** send(frame) -> bool; cardFor(reviewId) -> the review's card element or null */
  constructor({ send, cardFor }) {
    this.send = send;
    this.cardFor = cardFor;
    this.open = new Map();  // reviewId -> the decision element
  }

  /** session.pendingReviews: the reviews still waiting for the user. */
  restore(pending) {
    this.clear();
    for (const request of pending || []) this.request(request);
  }

  clear() {
    for (const node of this.open.values()) node.remove();
    this.open.clear();
  }

  request(frame) {
    const card = this.cardFor(frame.reviewId);
    if (!card || this.open.has(frame.reviewId)) return;
    const node = document.createElement("div");
    node.className = "review-ask";
    node.innerHTML = `<input class="review-message" placeholder="Optional note for the revision">
      <div class="row"><button type="button" class="accept">Accept as it is</button>
      <button type="button" class="primary revise">Revise</button></div>`;
    node.querySelector(".revise").addEventListener("click", () => this.answer(frame.reviewId, "revise"));
    node.querySelector(".accept").addEventListener("click", () => this.answer(frame.reviewId, "accept"));
    card.append(node);
    card.classList.add("asking");
    this.open.set(frame.reviewId, node);
    node.scrollIntoView({ block: "nearest" });
  }

  answer(reviewId, decision) {
    const node = this.open.get(reviewId);
    if (!node) return;
    const message = node.querySelector(".review-message").value.trim();
    const frame = { type: "review_decision", reviewId, decision };
    if (message) frame.message = message;
    if (!this.send(frame)) return;  // not connected: the buttons stay, to answer after reconnecting
    node.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  }

  /** The server's `review_decision`: answered here, elsewhere, or accepted for the user. */
  decided(frame) {
    this.open.get(frame.reviewId)?.remove();
    this.open.delete(frame.reviewId);
    const card = this.cardFor(frame.reviewId);
    if (!card) return;
    card.classList.remove("asking");
    decided(card, frame.decision, frame.reason);
  }
}
