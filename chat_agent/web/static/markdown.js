// Markdown and code as HTML that cannot run anything: raw HTML in the source is shown as
// text, links go only to http(s) and mailto, and code is highlighted by highlight.js.
import { Marked } from "./vendor/marked.esm.js";
import hljs from "./vendor/highlight.min.js";

export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function safeHref(href) {
  try {
    const url = new URL(href, location.href);
    return ["http:", "https:", "mailto:"].includes(url.protocol) ? href : null;
  } catch { return null; }
}

export function highlightCode(code, language) {
  if (language && hljs.getLanguage(language)) {
    return hljs.highlight(code, { language, ignoreIllegals: true }).value;
  }
  return escapeHtml(code);
}

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    html({ text }) { return escapeHtml(text); },
    link({ href, title, tokens }) {
      const inner = this.parser.parseInline(tokens);
      const safe = safeHref(href);
      if (!safe) return inner;
      const t = title ? ` title="${escapeHtml(title)}"` : "";
      return `<a href="${escapeHtml(safe)}"${t} target="_blank" rel="noopener noreferrer">${inner}</a>`;
    },
    image({ href, text }) {
      const safe = safeHref(href);
      return safe ? `<img src="${escapeHtml(safe)}" alt="${escapeHtml(text)}">` : escapeHtml(text);
    },
    code({ text, lang }) {
      const language = (lang || "").split(/\s/)[0];
      return `<pre><code class="hljs">${highlightCode(text, language)}</code></pre>`;
    },
  },
});

export function renderMarkdown(source) {
  return marked.parse(source || "");
}
