"""ConversationManager: the visible history, the model-facing history, and their size.

The visible history is what the user saw and is never rewritten. The model-facing history
is what the model is sent: a summary may replace its older part. Both are kept in memory
and written through the store writer, so reading them costs nothing and every change is
committed before any frame that depends on it reaches a client.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

from chat_agent.protocol import Usage, VisibleMessage
from chat_agent.store import AppendHistory, HistoryItem, ReplaceHistory, SetContextOverhead, UpsertHistoryItem
from chat_agent.context.summary import plan_summary, summary_message
from chat_agent.context.tokens import TokenCounter, content_chars
from chat_agent.store.writer import StoreWriter
from chat_agent.ids import new_id

Summarizer = Callable[[str], Awaitable[str]]


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


class ConversationManager:
    def __init__(self, owner: str, conversation_id: str, *, visible: Sequence[HistoryItem],
                 model: Sequence[HistoryItem], counter: TokenCounter, writer: StoreWriter,
                 summary_chars: int, max_tokens: int, overhead: int = 0):
        self.owner = owner
        self.conversation_id = conversation_id
        self.visible = [VisibleMessage.model_validate(item.data) for item in visible]
        self._items = list(model)
        self.messages: list[dict[str, Any]] = [item.data for item in self._items]
        self._counter = counter
        self._writer = writer
        self._summary_chars = summary_chars
        self.max_tokens = max_tokens
        self._history_tokens = sum(item.tokens for item in self._items)
        self._chars = sum(item.chars for item in self._items)
        self.epoch = 0  # bumped whenever the history loses messages (summary, clear, a refusal)
        # Where the newest user message began: its history item and how many blocks of that
        # item came before it (tool results an aborted turn left, which it was merged into).
        self._exchange: tuple[str, int] | None = None
        # Tokens the request carries besides the history (system prompt, tool schemas) plus
        # the estimator's error; re-measured from the API's own count after every call, and
        # stored, so the count a client sees does not change because the conversation reloaded.
        self._overhead = overhead

    # ---- size -------------------------------------------------------------------------

    @property
    def tokens(self) -> int:
        return self._history_tokens + self._overhead

    @property
    def chars(self) -> int:
        return self._chars

    def estimate_overhead(self, estimate: Callable[[], int]) -> None:
        """Before the API has reported anything, our estimate of system prompt and tools
        (a callable, so the estimate is only computed when it is needed)."""
        if self._overhead == 0:
            self._set_overhead(estimate())

    def needs_summary(self, adding: int = 0) -> bool:
        """Whether the history (with `adding` more characters) is due for a summary."""
        return self._chars + adding > self._summary_chars

    # ---- the visible history ----------------------------------------------------------

    def add_visible(self, message: VisibleMessage) -> None:
        self.visible.append(message)
        self._submit_visible(message, append=True)

    def replace_visible(self, message: VisibleMessage) -> None:
        """The finished (or aborted) form of a message already added, e.g. the reply."""
        for i, existing in enumerate(self.visible):
            if existing.id == message.id:
                self.visible[i] = message
                break
        else:
            self.visible.append(message)
        self._submit_visible(message, append=False)

    def _submit_visible(self, message: VisibleMessage, *, append: bool) -> None:
        data = message.model_dump(mode="json", exclude_none=True)
        item = HistoryItem(id=message.id, data=data, tokens=0, chars=len(message.content))
        op = (AppendHistory(self.owner, self.conversation_id, "visible", (item,)) if append
              else UpsertHistoryItem(self.owner, self.conversation_id, "visible", item))
        self._writer.submit([op])

    # ---- the model-facing history -----------------------------------------------------

    def add_user(self, content: str | list[dict[str, Any]]) -> None:
        """A user message; merged into a trailing user message (e.g. tool results left by an
        aborted turn) because the API wants roles to alternate."""
        blocks = _blocks(content)
        self._add_user_blocks(blocks)
        last = self._items[-1]
        self._exchange = (last.id, len(_blocks(last.data["content"])) - len(blocks))

    def _add_user_blocks(self, blocks: list[dict[str, Any]]) -> None:
        if self.messages and self.messages[-1]["role"] == "user":
            last = self._items[-1]
            merged = {"role": "user", "content": _blocks(last.data["content"]) + blocks}
            self._replace_last(merged, tokens=last.tokens + self._counter.content(blocks))
            return
        self._append({"role": "user", "content": blocks}, self._counter.content(blocks))

    def forget_exchange(self) -> bool:
        """Removes the newest user message and everything after it from the model-facing
        history (the visible one keeps them). False when a summary has already folded that
        message in, or there is none; the history is left as it is then."""
        if self._exchange is None:
            return False
        item_id, before = self._exchange
        at = next((n for n, item in enumerate(self._items) if item.id == item_id), None)
        if at is None:
            return False
        kept = self._items[:at]
        if before:  # what this message was merged into stays, as it was
            item = self._items[at]
            head = {"role": "user", "content": _blocks(item.data["content"])[:before]}
            kept.append(HistoryItem(id=item.id, data=head, tokens=self._counter.message(head),
                                    chars=content_chars(head["content"])))
        self._exchange = None
        self._reset(kept)
        self.epoch += 1
        return True

    def add_assistant(self, content: list[dict[str, Any]], usage: Usage | None = None) -> None:
        """A model reply. With the API's usage, the reply costs exactly its output tokens and
        everything before it costs what the API says it read."""
        if usage is not None:
            self._set_overhead(max(0, usage.prompt_tokens - self._history_tokens))
            tokens = usage.output_tokens
        else:
            tokens = self._counter.content(content)
        if self.messages and self.messages[-1]["role"] == "assistant":
            # The continuation of a reply the API paused (pause_turn) extends it, so roles
            # still alternate in what is stored and sent next.
            last = self._items[-1]
            merged = {"role": "assistant", "content": _blocks(last.data["content"]) + content}
            self._replace_last(merged, tokens=last.tokens + tokens)
            return
        self._append({"role": "assistant", "content": content}, tokens)

    def add_cut_reply(self, text: str, note: str) -> None:
        """What was streamed of a reply that did not finish, marked so the model knows."""
        text = text.rstrip()
        self.add_assistant([{"type": "text", "text": f"{text}\n\n{note}" if text else note}])

    def repair(self, streamed: str, note: str, cancelled_result: str) -> None:
        """Ends the model-facing history validly after a turn that never finished: the reply
        that was being streamed is kept, and tool calls that never got results get one."""
        if not self.messages:
            return
        last = self.messages[-1]
        if last["role"] == "user":
            self.add_cut_reply(streamed, note)
            return
        ids = [b["id"] for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
        if ids:
            self.add_tool_results([{"type": "tool_result", "tool_use_id": i, "content": cancelled_result,
                                    "is_error": True} for i in ids], note=note)

    def add_tool_results(self, results: list[dict[str, Any]], note: str | None = None) -> None:
        blocks = results + ([{"type": "text", "text": note}] if note else [])
        self._add_user_blocks(blocks)

    def _append(self, message: dict[str, Any], tokens: int) -> None:
        item = HistoryItem(id=new_id(hex_chars=16), data=message, tokens=tokens, chars=content_chars(message["content"]))
        self._items.append(item)
        self.messages.append(message)
        self._history_tokens += tokens
        self._chars += item.chars
        self._writer.submit([AppendHistory(self.owner, self.conversation_id, "model", (item,))])

    def _replace_last(self, message: dict[str, Any], tokens: int) -> None:
        old = self._items[-1]
        item = HistoryItem(id=old.id, data=message, tokens=tokens, chars=content_chars(message["content"]))
        self._items[-1] = item
        self.messages[-1] = message
        self._history_tokens += tokens - old.tokens
        self._chars += item.chars - old.chars
        self._writer.submit([UpsertHistoryItem(self.owner, self.conversation_id, "model", item)])

    # ---- summary and clearing -----------------------------------------------------------

    async def summarize(self, summarizer: Summarizer) -> bool:
        """Replaces the older part of the model-facing history with a summary. Returns False
        when there is nothing that can be cut without splitting a tool pair."""
        plan = plan_summary(self.messages, keep_chars=self._summary_chars // 4)
        if plan is None:
            return False
        cut, transcript = plan
        summary = await summarizer(transcript)
        if not summary:
            return False
        kept = self._items[cut:]
        head = summary_message(summary, kept[0].data if kept else None)
        if kept and kept[0].data["role"] == "user":
            kept = kept[1:]
        first = HistoryItem(id=new_id(hex_chars=16), data=head, tokens=self._counter.message(head),
                            chars=content_chars(head["content"]))
        self._reset([first, *kept])
        self.epoch += 1
        return True

    def clear(self) -> None:
        """Empties both histories (artifact and memories live elsewhere and stay)."""
        self.visible = []
        self._writer.submit([ReplaceHistory(self.owner, self.conversation_id, "visible", ())])
        self._reset([])
        self._set_overhead(0)
        self.epoch += 1

    def _set_overhead(self, tokens: int) -> None:
        if tokens != self._overhead:
            self._overhead = tokens
            self._writer.submit([SetContextOverhead(self.owner, self.conversation_id, tokens)])

    def _reset(self, items: list[HistoryItem]) -> None:
        self._items = items
        self.messages = [item.data for item in items]
        self._history_tokens = sum(item.tokens for item in items)
        self._chars = sum(item.chars for item in items)
        self._writer.submit([ReplaceHistory(self.owner, self.conversation_id, "model", tuple(items))])
