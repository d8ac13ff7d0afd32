// Runs the real AG-UI client against POST /api/ag-ui (tests/test_e2e_agui.py) and prints what
// it made of the run as one JSON line: the events it accepted (HttpAgent verifies their order
// and shapes, and fails the run on a violation), its messages and its state afterwards.
//   node run.mjs URL THREAD_ID TEXT [ABORT_AFTER_EVENT_TYPE]
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, text, abortAfter] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });
agent.addMessage({ id: "user-1", role: "user", content: text });
const events = [];
let failure = null;
try {
  await agent.runAgent({ runId: "run-js-1", forwardedProps: {} }, {
    onEvent: ({ event }) => {
      events.push(event.type);
      if (abortAfter && event.type === abortAfter) agent.abortRun();
    },
  });
} catch (error) {
  failure = String(error && error.message ? error.message : error);
}
console.log(JSON.stringify({ events, messages: agent.messages, state: agent.state, failure }));
