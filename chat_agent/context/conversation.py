"""ConversationManager: the visible history, the model-facing history, and their size.

The visible history is what the user saw and is never rewritten. The model-facing history
is what the model is sent: a summary may replace its older part. Every change to either is
written through the store writer, so it is committed before any frame that depends on it
reaches a client.

Neither history is held in memory while the conversation is idle, so an open conversation
costs the same whatever its length: the visible history is only written here (readers page
it from the store), and the model-facing history is loaded when a turn needs it (`load`) and
let go when the turn is over (`release`). Only its size (tokens, characters) stays, so the
count a client sees and the summary threshold need no reading.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Sequence

from chat_agent.protocol import Usage, VisibleMessage
from chat_agent.store import (AppendHistory, DeleteHistoryItems, HistoryItem, HistorySize, ReplaceHistory,
                              SetContextOverhead, SetLeaf, Store, UpsertHistoryItem)
from chat_agent.store.tree import EMPTY, ROOT
from chat_agent.context.summary import plan_summary, summary_message
from chat_agent.context.tokens import TokenCounter, content_chars
from chat_agent.model.types import KeptMessage, encode_json, made_of
from chat_agent.store.writer import StoreWriter
from chat_agent.ids import new_id

Summarizer = Callable[[str], Awaitable[str]]
PIECES = 32  # pieces of a request's kept history JSON before they are joined into one (`encoded`)


def _kept(message: dict[str, Any], raw: bytes | None = None) -> KeptMessage:
    if isinstance(message, KeptMessage):
        return message
    return KeptMessage(message) if raw is None else KeptMessage.stored(message, raw)


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


class ConversationManager:
    """`model` is the model-facing history already in hand (it is then loaded); otherwise
    `size` says what the store holds, and `load` reads it from `store` when a turn needs it."""

    def __init__(self, owner: str, conversation_id: str, *, counter: TokenCounter, writer: StoreWriter,
                 summary_chars: int, max_tokens: int, overhead: int = 0, store: Store | None = None,
                 model: Sequence[HistoryItem] | None = None, size: HistorySize = HistorySize(),
                 leaf: str | None = None):
        self.owner = owner
        self.conversation_id = conversation_id
        self._store = store
        self._items: list[HistoryItem] | None = None
        self._messages: list[dict[str, Any]] | None = None
        # What `encoded` made last: (of which list, how many of its messages, their JSON, the
        # last of them): good while that list holds the same message there.
        self._encoded: tuple[list[dict[str, Any]], int, tuple[bytes, ...], dict[str, Any]] | None = None
        self._counter = counter
        self._writer = writer
        self._summary_chars = summary_chars
        self.max_tokens = max_tokens
        self._history_tokens, self._chars = size.tokens, size.chars
        if model is not None:
            self._hold(list(model))
        self.epoch = 0  # bumped whenever the history loses messages (summary, clear, a refusal)
        self.visible_version = 0  # bumped with every change of the visible history written
        # Where the newest user message began: its history item and how many blocks of that
        # item came before it (tool results an aborted turn left, which it was merged into).
        self._exchange: tuple[str, int] | None = None
        # Tokens the request carries besides the history (system prompt, tool schemas) plus
        # the estimator's error; re-measured from the API's own count after every call, and
        # stored, so the count a client sees does not change because the conversation reloaded.
        self._overhead = overhead
        # The tree (PROTOCOL 1.2): the last message of the active path, which the model-facing
        # history in hand is that of; and the message that items added now belong to.
        # Stored as EMPTY once moved before the first message (NULL is "never set": the newest).
        self.leaf = None if leaf == EMPTY else leaf
        self._at_root = leaf == EMPTY  # the active path was moved before the first message (no leaf)
        self._node: str | None = None

    # ---- holding the model-facing history ---------------------------------------------------

    @property
    def loaded(self) -> bool:
        return self._items is not None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The model-facing history; only while it is loaded (a turn runs)."""
        if self._messages is None:
            raise RuntimeError(f"the model-facing history of {self.conversation_id} is not loaded")
        return self._messages

    async def load(self) -> None:
        """Reads the model-facing history for a turn. What the last turn wrote may still be
        queued in the writer: the store has it once the writer has committed it."""
        if self._items is not None:
            return
        if self._store is None:
            raise RuntimeError("a manager without a store cannot load its history")
        await self._writer.wait_for(self._writer.ticket)
        leaf = self.leaf if self.leaf is not None else EMPTY if self._at_root else None
        self._hold(await self._store.load_history(self.owner, self.conversation_id, "model", leaf))

    def release(self) -> None:
        """Lets the model-facing history go (every change of it is already submitted); only
        its size stays. The next `load` reads it again."""
        if self._store is not None:
            self._items = self._messages = None
            self._encoded = None
        self._exchange = None

    def _hold(self, items: list[HistoryItem]) -> None:
        # Kept messages: each is encoded for the API once, not again with every call (nor
        # after a summary, which holds the items it keeps again); one read from the store
        # is sent as the JSON it was stored as.
        for item in items:
            item.data, item.raw = _kept(item.data, item.raw), None
        self._items = items
        self._messages = [item.data for item in items]
        self._history_tokens = sum(item.tokens for item in items)
        self._chars = sum(item.chars for item in items)

    def encoded(self, count: int) -> tuple[int, tuple[bytes, ...]]:
        """The API's JSON of the first `count` model-facing messages as a request sends them
        (`ModelRequest.encoded`): kept from call to call and extended by what came since, a
        piece per extension (joined into one now and then), so that neither this nor the
        request copies the whole history more than once. Walking 2,000 messages for their
        JSON took ~0.6 ms a call, and copying their 330 KB into a longer string at every
        call, then again into the body, ~0.1 ms more."""
        messages = self.messages
        kept = self._encoded
        if kept is None or kept[0] is not messages or kept[1] > count or messages[kept[1] - 1] is not kept[3]:
            kept = None  # another list (a summary, another path) or its last message replaced
        done, pieces = (0, ()) if kept is None else (kept[1], kept[2])
        if count > done:
            pieces = (*pieces, b",".join(made_of(messages[done:count], "json", encode_json)))
            if len(pieces) > PIECES:
                pieces = (b",".join(pieces),)
            self._encoded = (messages, count, pieces, messages[count - 1])
        return count, pieces

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
        self._submit_visible(message, append=True)

    def replace_visible(self, message: VisibleMessage) -> None:
        """The finished (or aborted) form of a message already added (it keeps its place), or
        a new one at the end, e.g. the reply."""
        self._submit_visible(message, append=False)

    def _submit_visible(self, message: VisibleMessage, *, append: bool) -> None:
        self.visible_version += 1
        if append:  # a new message continues the active path
            message.parent_id = self.leaf
        data = message.model_dump(mode="json", exclude_none=True, exclude={"branch"})
        item = HistoryItem(id=message.id, data=data, tokens=0, chars=len(message.content),
                           parent_id=ROOT if message.parent_id is None else message.parent_id)
        op = (AppendHistory(self.owner, self.conversation_id, "visible", (item,)) if append
              else UpsertHistoryItem(self.owner, self.conversation_id, "visible", item))
        ops = [op]
        if message.parent_id == self.leaf and message.id != self.leaf:  # it extends the active path
            self.leaf, self._at_root = message.id, False
            ops.append(SetLeaf(self.owner, self.conversation_id, message.id))
        if append and message.role == "user":
            self._node = message.id
        self._writer.submit(ops)

    # ---- the tree -----------------------------------------------------------------------

    def begin_reply(self, message_id: str) -> None:
        """What the model adds from now on belongs to this reply (the visible message it will be)."""
        self._node = message_id

    def move_to(self, leaf: str | None) -> None:
        """Makes the path that ends at `leaf` (None: before the first message) the active one.
        The model-facing history in hand is another path's: let go, read again by `load`."""
        if leaf == self.leaf and (leaf is not None or self._at_root):
            return
        self.leaf, self._at_root = leaf, leaf is None
        self._items = self._messages = None
        self._encoded = None
        self._exchange = None
        self.visible_version += 1
        self._writer.submit([SetLeaf(self.owner, self.conversation_id, EMPTY if leaf is None else leaf)])

    # ---- the model-facing history -----------------------------------------------------

    def tail_id(self) -> str | None:
        """The id of the newest history item (the message a regenerated reply answers)."""
        return self._held[-1].id if self._held else None

    def position(self, item_id: str) -> int | None:
        """Where the history item of that id is, None when it is not (a summary took it)."""
        return next((n for n, item in enumerate(self._held) if item.id == item_id), None)

    def add_user(self, content: str | list[dict[str, Any]]) -> str:
        """A user message; merged into a trailing user message (e.g. tool results left by an
        aborted turn) because the API wants roles to alternate. The id of its history item."""
        blocks = _blocks(content)
        self._add_user_blocks(blocks)
        last = self._held[-1]
        self._exchange = (last.id, len(_blocks(last.data["content"])) - len(blocks))
        return last.id

    def _add_user_blocks(self, blocks: list[dict[str, Any]]) -> None:
        if self.messages and self.messages[-1]["role"] == "user":
            last = self._held[-1]
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
        items = self._held
        at = next((n for n, item in enumerate(items) if item.id == item_id), None)
        if at is None:
            return False
        kept, gone = items[:at], items[at:]
        ops: list[Any] = []
        if before:  # what this message was merged into stays, as it was
            item = items[at]
            head = {"role": "user", "content": _blocks(item.data["content"])[:before]}
            if item.supersedes:  # stored as it was: the merged item goes, and it is back
                kept.append(HistoryItem(id=item.supersedes[0], data=head, tokens=self._counter.message(head),
                                        chars=content_chars(head["content"])))
            else:
                kept.append(HistoryItem(id=item.id, data=head, tokens=self._counter.message(head),
                                        chars=content_chars(head["content"]), node=item.node))
                ops.append(UpsertHistoryItem(self.owner, self.conversation_id, "model", kept[-1]))
                gone = gone[1:]
        ops.insert(0, DeleteHistoryItems(self.owner, self.conversation_id, "model", tuple(i.id for i in gone)))
        self._exchange = None
        self._hold(kept)
        self._writer.submit(ops)
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
            last = self._held[-1]
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
        message = KeptMessage(message)
        item = HistoryItem(id=new_id(hex_chars=16), data=message, tokens=tokens, chars=content_chars(message["content"]),
                           node=self._node)
        self.messages.append(message)
        self._held.append(item)
        self._history_tokens += tokens
        self._chars += item.chars
        self._writer.submit([AppendHistory(self.owner, self.conversation_id, "model", (item,))])

    def _replace_last(self, message: dict[str, Any], tokens: int) -> None:
        message = KeptMessage(message)
        old = self._held[-1]
        chars = content_chars(message["content"])
        if old.node != self._node:
            # The old item is another message's, which other paths keep as it was: this path
            # gets a new item in its place.
            item = HistoryItem(id=new_id(hex_chars=16), data=message, tokens=tokens, chars=chars, node=self._node,
                               supersedes=(old.id,))
            op: AppendHistory | UpsertHistoryItem = AppendHistory(self.owner, self.conversation_id, "model", (item,))
        else:
            item = HistoryItem(id=old.id, data=message, tokens=tokens, chars=chars, node=old.node,
                               supersedes=old.supersedes, base=old.base)
            op = UpsertHistoryItem(self.owner, self.conversation_id, "model", item)
        self._held[-1] = item
        self.messages[-1] = message
        self._history_tokens += tokens - old.tokens
        self._chars += item.chars - old.chars
        self._writer.submit([op])

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
        replaced, kept = self._held[:cut], self._held[cut:]
        head = summary_message(summary, kept[0].data if kept else None)
        if kept and kept[0].data["role"] == "user":
            replaced, kept = [*replaced, kept[0]], kept[1:]
        # It stands for what it replaces on every path through the newest message it covers:
        # those paths share everything it covers, and no other path uses it.
        node = next((item.node for item in reversed(replaced) if item.node is not None), None)
        first = HistoryItem(id=new_id(hex_chars=16), data=head, tokens=self._counter.message(head),
                            chars=content_chars(head["content"]), node=node,
                            supersedes=tuple(item.id for item in replaced), base=True)
        self._hold([first, *kept])
        self._writer.submit([AppendHistory(self.owner, self.conversation_id, "model", (first,))])
        self.epoch += 1
        return True

    def clear(self) -> None:
        """Empties both histories (artifact and memories live elsewhere and stay)."""
        self.visible_version += 1
        self._writer.submit([ReplaceHistory(self.owner, self.conversation_id, "visible", ()),
                             SetLeaf(self.owner, self.conversation_id, None)])
        self.leaf, self._at_root, self._node = None, False, None
        self._reset([])
        self._set_overhead(0)
        self.epoch += 1

    def _set_overhead(self, tokens: int) -> None:
        if tokens != self._overhead:
            self._overhead = tokens
            self._writer.submit([SetContextOverhead(self.owner, self.conversation_id, tokens)])

    @property
    def _held(self) -> list[HistoryItem]:
        if self._items is None:
            raise RuntimeError(f"the model-facing history of {self.conversation_id} is not loaded")
        return self._items

    def _reset(self, items: list[HistoryItem]) -> None:
        self._hold(items)  # an empty history needs no loading: clear holds it even between turns
        self._writer.submit([ReplaceHistory(self.owner, self.conversation_id, "model", tuple(items))])
