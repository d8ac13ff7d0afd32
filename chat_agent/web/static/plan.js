// Plans (PROTOCOL 1.2 "Plans"): the model's checklist for multi-step work. Each `update_plan`
// card in a reply is drawn as one (chat.js); the latest plan also stays in sight above the
// messages, from `session.plan` on (re)connecting, from the newest reply's last successful
// `update_plan` call after a branch switch, and live from each call that ends well.
const MARKS = { pending: "○", in_progress: "◐", done: "●", skipped: "–" };
const TOOL = "update_plan";

/** The steps as a checklist (`ol.plan-steps`), and how many are settled. */
export function planList(steps) {
  const list = document.createElement("ol");
  list.className = "plan-steps";
  for (const step of steps) {
    const item = document.createElement("li");
    item.className = `plan-step ${step.status}`;
    item.dataset.status = step.status;
    const mark = Object.assign(document.createElement("span"), { className: "plan-mark", textContent: MARKS[step.status] || "○" });
    mark.setAttribute("aria-hidden", "true");
    item.setAttribute("aria-label", `${step.title} (${step.status.replace("_", " ")})`);
    item.append(mark, document.createTextNode(step.title));
    list.append(item);
  }
  return { list, done: steps.filter((s) => s.status === "done" || s.status === "skipped").length };
}

/** The newest reply's plan, as the server's `session.plan` is made (sessions/plan.py). */
export function latestPlan(messages) {
  const reply = [...messages].reverse().find((m) => m.role === "assistant");
  const call = [...(reply?.parts || [])].reverse()
    .find((p) => p.type === "tool" && p.name === TOOL && p.duration != null && !p.isError);
  return Array.isArray(call?.input?.steps) ? call.input.steps : null;
}

export class PlanBar {
  constructor(messages) {
    this.node = Object.assign(document.createElement("details"), { className: "plan-bar", hidden: true });
    this.node.setAttribute("aria-label", "The assistant's plan");
    messages.before(this.node);
    this.inputs = new Map();  // toolId -> the steps of an update_plan call still running
  }

  set(steps) {
    if (!Array.isArray(steps) || !steps.length) { this.node.hidden = true; this.node.replaceChildren(); return; }
    const { list, done } = planList(steps);
    const now = steps.find((s) => s.status === "in_progress");
    const summary = document.createElement("summary");
    summary.textContent = `Plan: ${done} of ${steps.length} done${now ? ` · ${now.title}` : ""}`;
    const open = this.node.open;
    this.node.replaceChildren(summary, list);
    this.node.open = open;
    this.node.hidden = false;
  }

  toolStart(frame) { if (frame.name === TOOL) this.inputs.set(frame.toolId, frame.input?.steps); }

  toolEnd(frame) {
    if (!this.inputs.has(frame.toolId)) return;
    const steps = this.inputs.get(frame.toolId);
    this.inputs.delete(frame.toolId);
    if (!frame.isError) this.set(steps);
  }
}
