// The HTTP side of the protocol (PROTOCOL.md "HTTP"), with the caller's token when auth is on.
const TOKEN_KEY = "chat-agent.token";

export const auth = {
  get token() { return localStorage.getItem(TOKEN_KEY) || ""; },
  set token(value) { value ? localStorage.setItem(TOKEN_KEY, value) : localStorage.removeItem(TOKEN_KEY); },
};

export class HttpError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

function headers(extra = {}) {
  return auth.token ? { ...extra, Authorization: `Bearer ${auth.token}` } : extra;
}

async function failure(response) {
  let body = null;
  try { body = await response.json(); } catch { /* not JSON */ }
  const error = body && body.error ? body.error : {};
  return new HttpError(response.status, error.code || "http_error", error.message || `HTTP ${response.status}`);
}

export async function request(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  if (!response.ok) throw await failure(response);
  return response.status === 204 ? null : response.json();
}

/** Whether `url` points at this page's own origin (what `/x`, but not `//host/x` or `/\\host/x`, does). */
export function sameOrigin(url) {
  try { return new URL(url, location.href).origin === location.origin; } catch { return false; }
}

/** A URL the browser fetches by itself (an <img>): the token rides in the query when auth is on,
 * and only to our own origin: never to a host a model or a tool named. */
export function authedUrl(url) {
  if (!auth.token || !sameOrigin(url)) return url;
  return url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(auth.token);
}

/** GET a same-origin path as a Blob, with the token in the header. */
export async function fetchBlob(path) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw await failure(response);
  return response.blob();
}

export function socketUrl(conversationId) {
  const url = new URL("/api/chat-agent", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  if (conversationId) url.searchParams.set("conversationId", conversationId);
  if (auth.token) url.searchParams.set("token", auth.token);
  return url.toString();
}

/** POST /api/uploads with progress (fetch reports none for uploads): resolves to the upload. */
export function upload(file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/uploads");
    for (const [k, v] of Object.entries(headers())) xhr.setRequestHeader(k, v);
    xhr.upload.onprogress = (e) => e.lengthComputable && onProgress(e.loaded / e.total);
    xhr.onload = () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch { /* not JSON */ }
      if (xhr.status === 201) resolve(body);
      else reject(new HttpError(xhr.status, body?.error?.code || "http_error", body?.error?.message || `HTTP ${xhr.status}`));
    };
    xhr.onerror = () => reject(new HttpError(0, "network", "The upload failed: no connection."));
    const form = new FormData();
    form.append("file", file, file.name);
    xhr.send(form);
  });
}

/** Downloads a GET route's body as a file, named as the server's Content-Disposition says. */
export async function download(path, fallbackName) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw await failure(response);
  const disposition = response.headers.get("Content-Disposition") || "";
  const star = /filename\*=UTF-8''([^;]+)/i.exec(disposition);
  const plain = /filename="?([^";]+)"?/i.exec(disposition);
  const name = star ? decodeURIComponent(star[1]) : plain ? plain[1] : fallbackName;
  const link = document.createElement("a");
  link.href = URL.createObjectURL(await response.blob());
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
  return name;
}
