// The quick-action bar above the artifact: the built-in actions of PROTOCOL.md for the
// artifact's type, and the user's custom ones.
const TEXT = [
  { label: "Emojis", action: { name: "emojis" } },
  { label: "Shorter", action: { name: "length", length: "short" } },
  { label: "Longer", action: { name: "length", length: "long" } },
];
const LEVELS = ["child", "teenager", "college", "phd", "pirate"];
const LANGUAGES = ["English", "French", "German", "Spanish", "Italian", "Portuguese", "Japanese", "Chinese", "Hindi", "Arabic"];
const CODE = [
  { label: "Add comments", action: { name: "add_comments" } },
  { label: "Add logs", action: { name: "add_logs" } },
  { label: "Fix bugs", action: { name: "fix_bugs" } },
];
const PORTS = ["python", "typescript", "javascript", "go", "rust", "java", "cpp", "php"];

function button(label, onClick, className = "") {
  const node = Object.assign(document.createElement("button"), { type: "button", textContent: label, className });
  node.addEventListener("click", onClick);
  return node;
}

function picker(label, values, onPick) {
  const select = document.createElement("select");
  select.setAttribute("aria-label", label.replace("…", ""));
  select.append(new Option(label, ""), ...values.map((v) => new Option(v, v)));
  select.addEventListener("change", () => { if (select.value) onPick(select.value); select.value = ""; });
  return select;
}

/** Fills `bar` for an artifact of `type`; run(action, label) starts the action. */
export function renderQuickActions(bar, type, custom, run) {
  bar.replaceChildren();
  if (type === "code") {
    for (const { label, action } of CODE) bar.append(button(label, () => run(action, label)));
    bar.append(picker("Port to…", PORTS, (language) => run({ name: "port_language", language }, `Port to ${language}`)));
  } else {
    for (const { label, action } of TEXT) bar.append(button(label, () => run(action, label)));
    bar.append(picker("Reading level…", LEVELS, (level) => run({ name: "reading_level", level }, `Reading level: ${level}`)));
    bar.append(picker("Translate…", LANGUAGES, (language) => run({ name: "translate", language }, `Translate to ${language}`)));
  }
  for (const action of custom) bar.append(button(action.title, () => run({ name: "custom", id: action.id }, action.title), "custom"));
}
