// The WebSocket: one conversation at a time, frames applied in `seq` order exactly once,
// reconnection with `resume` after a dropped socket. (A reload comes back to the same
// conversation through its address, `/c/{id}`: main.js.)
import { socketUrl } from "./api.js";

const GAP_WAIT_MS = 3000;  // a replay that leaves a hole this long: start over from a snapshot

export class Connection {
  /** handlers: onSession(frame, resumed), onFrame(frame), onStatus(text, kind), onUnauthorized(), onGone() */
  constructor(handlers) {
    this.h = handlers;
    this.ws = null;
    this.conversationId = null;
    this.lastSeq = 0;
    this.pending = new Map();  // seq -> frame that arrived before the frames ahead of it
    this.retry = 0;
    this.keepState = false;    // true while the page still shows everything up to lastSeq
  }

  open(conversationId) {
    this.close();
    this.conversationId = conversationId || null;
    this.lastSeq = 0;
    this.keepState = false;
    this.pending.clear();
    this.connect();
  }

  close() {
    if (this.ws) { this.ws.onclose = null; this.ws.close(); this.ws = null; }
    clearTimeout(this.timer);
  }

  send(frame) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(JSON.stringify(frame));
    return true;
  }

  connect() {
    this.h.onStatus("connecting…", "");
    const ws = new WebSocket(socketUrl(this.conversationId));
    this.ws = ws;
    let first = true;
    ws.onmessage = (event) => {
      const frame = JSON.parse(event.data);
      if (first) { first = false; this.session(frame); return; }
      this.receive(frame);
    };
    ws.onopen = () => { this.retry = 0; this.h.onStatus("connected", "online"); };
    ws.onclose = (event) => this.closed(event);
  }

  session(frame) {
    if (frame.type !== "session") { this.h.onFrame(frame); return; }
    const same = this.conversationId === frame.conversationId;
    this.conversationId = frame.conversationId;
    // Back after a drop with the page intact: ask for what we missed rather than redraw.
    const resumed = same && this.keepState && this.lastSeq > 0 && frame.seq >= this.lastSeq;
    if (resumed && frame.seq > this.lastSeq) {
      this.send({ type: "resume", afterSeq: this.lastSeq });
      this.watchGap();
    } else if (!resumed) {
      this.lastSeq = frame.seq;
    }
    this.keepState = true;
    this.h.onSession(frame, resumed);
  }

  receive(frame) {
    if (typeof frame.seq !== "number") { this.h.onFrame(frame); return; }
    if (frame.seq <= this.lastSeq) return;  // already shown (a replay overlapping the live stream)
    this.pending.set(frame.seq, frame);
    while (this.pending.has(this.lastSeq + 1)) {
      const next = this.pending.get(this.lastSeq + 1);
      this.pending.delete(this.lastSeq + 1);
      this.lastSeq = next.seq;
      this.h.onFrame(next);
    }
    if (this.pending.size) this.watchGap(); else clearTimeout(this.gapTimer);
  }

  watchGap() {
    clearTimeout(this.gapTimer);
    this.gapTimer = setTimeout(() => {
      if (!this.pending.size && this.lastSeq > 0) return;
      // The server no longer holds the frames in between: redraw from a fresh snapshot.
      this.keepState = false;
      this.pending.clear();
      this.close();
      this.connect();
    }, GAP_WAIT_MS);
  }

  closed(event) {
    this.ws = null;
    if (event.code === 4401) { this.h.onStatus("signed out", "offline"); this.h.onUnauthorized(); return; }
    if (event.code === 4404) { this.h.onGone(); return; }
    this.h.onStatus("reconnecting…", "offline");
    const delay = Math.min(8000, 300 * 2 ** this.retry++);
    this.timer = setTimeout(() => this.connect(), delay);
  }
}
