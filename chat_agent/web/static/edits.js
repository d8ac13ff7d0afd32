// The user's own edits of the artifact, as lines in the chat ("You edited the document (v4)"):
// the versions the user wrote (`source: "user"` in the versions list), each in its place in
// time among the messages shown. Asked again whenever the artifact may have a new version.
import { request } from "./api.js";

export class UserEdits {
  /** conversation() -> id; canvas: canvas.js's Canvas; chat: chat.js's Chat */
  constructor({ conversation, canvas, chat }) {
    Object.assign(this, { conversation, canvas, chat });
  }

  async sync() {
    const id = this.conversation();
    if (!id || !this.canvas.state) return;
    let versions;
    try {
      ({ versions } = await request("GET", `/api/conversations/${id}/artifact/versions`));
    } catch { return; }  // not stored yet (404), or the connection is down: the next sync shows them
    if (id !== this.conversation()) return;
    for (const version of versions) {
      if (version.source === "user") this.chat.userEdit(version, this.canvas.current?.type, (index) => this.canvas.select(index));
    }
  }
}
