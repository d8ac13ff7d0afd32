// Runs the AI SDK's own chat client against POST /api/chat (tests/test_e2e_aisdk.py): the `Chat`
// logic of the `ai` package (AbstractChat, what useChat wraps, with a plain state as
// @ai-sdk/react keeps one) on its DefaultChatTransport, which parses the UI message stream with
// the SDK's own schema. Reads a script as JSON (argv[2]), prints one JSON line: the chat's
// messages, status and error after each step, and the transient data parts (`onData`).
//   node run.mjs '{"api": URL, "id": CHAT_ID, "token": T?, "steps": [...]}'
// Steps: {"send": TEXT, "body"?}, {"edit": TEXT, "index": N} (useChat's edit of user message N),
// {"regenerate": true}, {"approve": BOOL, "reason"?} (answers the open approval request; the chat
// sends the answer itself), {"send": TEXT, "drop": N} (the connection breaks after N chunks of
// the answer, then `resumeStream`), {"resume": true}, {"load": true} (the stored chat from
// GET {api}/{id}/messages, checked by the SDK's validateUIMessages, as the chat's messages).
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  validateUIMessages,
} from "ai";

const script = JSON.parse(process.argv[2]);

class PlainState {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage = (message) => { this.messages = [...this.messages, message]; };
  popMessage = () => { this.messages = this.messages.slice(0, -1); };
  replaceMessage = (index, message) => {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  };
  snapshot = (thing) => structuredClone(thing);
}

class Chat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new PlainState() });
  }
}

// A connection that breaks: the answer's body fails like a dropped network after `drop` chunks.
let drop = null;
async function fetchThatMayDrop(input, init) {
  const response = await fetch(input, init);
  if (drop === null || init?.method !== "POST") return response;
  let left = drop;
  drop = null;
  const reader = response.body.getReader();
  const body = new ReadableStream({
    async pull(controller) {
      if (left-- <= 0) {
        reader.cancel().catch(() => {});
        controller.error(new TypeError("network error"));
        return;
      }
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
}

const data = [];
const errors = [];
const headers = script.token ? { Authorization: `Bearer ${script.token}` } : {};
const chat = new Chat({
  id: script.id,
  transport: new DefaultChatTransport({ api: script.api, headers, fetch: fetchThatMayDrop }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onData: (part) => data.push(part),
  onError: (error) => errors.push(String(error.message ?? error)),
});

async function settled() {
  // The chat goes on by itself after an approval: wait until nothing runs.
  for (let i = 0; i < 600; i++) {
    await new Promise((r) => setTimeout(r, 50));
    if (chat.status !== "submitted" && chat.status !== "streaming") return;
  }
  throw new Error(`the chat did not settle: ${chat.status}`);
}

function openApproval() {
  for (const message of chat.messages) {
    for (const part of message.parts) {
      if (part.type.startsWith("tool-") && part.state === "approval-requested") return part.approval.id;
    }
  }
  return null;
}

const outcomes = [];
for (const step of script.steps) {
  if (step.drop !== undefined) drop = step.drop;
  if (step.edit !== undefined) {
    const message = chat.messages.filter((m) => m.role === "user")[step.index];
    await chat.sendMessage({ text: step.edit, messageId: message.id }, { body: step.body });
  } else if (step.send !== undefined) {
    await chat.sendMessage({ text: step.send }, { body: step.body });
    if (step.drop !== undefined) {
      outcomes.push({ status: chat.status, error: chat.error ? String(chat.error.message) : null,
                      messages: structuredClone(chat.messages) });
      await chat.resumeStream();
    }
  } else if (step.regenerate) {
    await chat.regenerate({ body: step.body });
  } else if (step.approve !== undefined) {
    const id = openApproval();
    if (id === null) throw new Error("no approval request is open");
    await chat.addToolApprovalResponse({ id, approved: step.approve, reason: step.reason });
  } else if (step.resume) {
    await chat.resumeStream();
  } else if (step.load) {
    const response = await fetch(`${script.api}/${encodeURIComponent(script.id)}/messages`, { headers });
    if (!response.ok) throw new Error(`loading the chat: ${response.status} ${await response.text()}`);
    chat.messages = await validateUIMessages({ messages: (await response.json()).messages });
  }
  await settled();
  outcomes.push({ status: chat.status, error: chat.error ? String(chat.error.message) : null,
                  messages: structuredClone(chat.messages) });
}
console.log(JSON.stringify({ outcomes, data, errors }));
