// Runs the real AG-UI client against POST /api/ag-ui (tests/test_e2e_agui.py) and prints what
// it made of the runs as one JSON line: the events it accepted per run (HttpAgent verifies
// their order and shapes, and fails the run on a violation), its messages and its state.
//   node run.mjs URL THREAD_ID TEXT [OPTIONS_JSON]
// OPTIONS: abortAfter (an event type: the client aborts its run there), tools and context
// (RunAgentInput's), toolResults ({toolName: result}: the client runs its tools as CopilotKit
// does, and runs again with the result), resume ({reason: payload}: the client answers the
// interrupts a run ended with, and runs again), state (the client's state before the run),
// maxRuns.
import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const [url, threadId, text, optionsJson] = process.argv.slice(2);
const options = JSON.parse(optionsJson || "{}");
const agent = new HttpAgent({ url, threadId, initialState: options.state ?? {} });
agent.addMessage({ id: "user-1", role: "user", content: text });
const runs = [];
let failure = null;
let next = { runId: "run-js-1", forwardedProps: {}, tools: options.tools ?? [], context: options.context ?? [] };
try {
  for (let n = 1; next && n <= (options.maxRuns ?? 4); n++) {
    const events = [];
    let finished = null;
    runs.push({ events, interrupts: [], toolCalls: [] });
    await agent.runAgent(next, {
      onEvent: ({ event }) => {
        events.push(event.type);
        if (event.type === "RUN_FINISHED") finished = event;
        if (options.abortAfter && event.type === options.abortAfter) agent.abortRun();
      },
    });
    next = null;
    const base = { runId: `run-js-${n + 1}`, forwardedProps: {}, tools: options.tools ?? [],
                   context: options.context ?? [] };
    const waiting = agent.pendingInterrupts;
    if (waiting.length && options.resume) {
      runs.at(-1).interrupts = waiting.map((i) => i.id);
      const responses = Object.fromEntries(waiting.map((i) => [i.id, { status: "resolved",
                                                                         payload: options.resume[i.reason] }]));
      next = { ...base, resume: buildResumeArray(waiting, responses) };
    } else if (finished?.result?.stopReason === "waiting" && options.toolResults) {
      // The client's own tools: the calls the run ended at, answered as tool messages.
      const calls = agent.messages.flatMap((m) => m.role === "assistant" ? m.toolCalls ?? [] : [])
        .filter((c) => finished.result.toolCallIds.includes(c.id));
      for (const call of calls) {
        runs.at(-1).toolCalls.push({ name: call.function.name, args: JSON.parse(call.function.arguments) });
        agent.addMessage({ id: `result-${call.id}`, role: "tool", toolCallId: call.id,
                           content: options.toolResults[call.function.name] });
      }
      next = calls.length ? base : null;
    }
  }
} catch (error) {
  failure = String(error && error.message ? error.message : error);
}
const events = runs.flatMap((r) => r.events);
console.log(JSON.stringify({ events, runs, messages: agent.messages, state: agent.state, failure }));
