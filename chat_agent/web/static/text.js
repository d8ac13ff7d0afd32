// Offsets on the wire count Unicode code points (PROTOCOL 1.1), JavaScript strings UTF-16 units.

/** The code-point offset of UTF-16 index `index` in `text`. */
export function codePointOffset(text, index) {
  let points = 0;
  for (let i = 0; i < index; i++) {
    const code = text.charCodeAt(i);
    if (code >= 0xd800 && code <= 0xdbff && i + 1 < index) i++;
    points++;
  }
  return points;
}

export function sliceCodePoints(text, start, end) {
  return Array.from(text).slice(start, end).join("");
}

/** An artifact_edit's changes (ascending, on the base, end exclusive) applied to `base`. */
export function applyChanges(base, changes) {
  const points = Array.from(base);
  const out = [];
  let at = 0;
  for (const { start, end, text } of changes) {
    out.push(points.slice(at, start).join(""), text);
    at = end;
  }
  out.push(points.slice(at).join(""));
  return out.join("");
}
