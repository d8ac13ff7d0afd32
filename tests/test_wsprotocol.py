"""The lighter pieces of uvicorn's WebSocket protocol (chat_agent/web/wsprotocol.py) keep the
behaviour uvicorn relies on: frames read in order, a reader woken by the next frame, sends
held while the write buffer is full and let go when it drains; an `abort` in the inbox is
urgent work."""

from __future__ import annotations

import asyncio

from chat_agent.urgency import LONGEST_PAUSE, Urgency
from chat_agent.web.wsprotocol import _Gate, _Inbox
from tests.support import polled


async def test_inbox_hands_frames_over_in_order_and_wakes_a_waiting_reader():
    inbox = _Inbox()
    assert inbox.empty()
    reader = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    assert not reader.done()  # nothing to read yet: it waits
    inbox.put_nowait({"n": 1})
    inbox.put_nowait({"n": 2})
    assert await reader == {"n": 1}
    assert not inbox.empty()
    assert await inbox.get() == {"n": 2}
    assert inbox.empty()


async def test_inbox_reader_cancelled_while_waiting_leaves_it_usable():
    inbox = _Inbox()
    reader = asyncio.create_task(inbox.get())
    await asyncio.sleep(0)
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    inbox.put_nowait("next")
    assert await asyncio.wait_for(inbox.get(), 1) == "next"


async def test_gate_holds_sends_while_closed_and_releases_all_of_them():
    gate = _Gate()
    await asyncio.wait_for(gate.wait(), 1)  # open: no wait at all
    gate.clear()
    assert not gate.is_set()
    waiting = [asyncio.create_task(gate.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(task.done() for task in waiting)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*waiting), 1)
    assert gate.is_set()


def _text(frame: str) -> dict[str, str]:
    return {"type": "websocket.receive", "text": frame}


async def test_an_abort_is_urgent_from_the_moment_it_is_read_until_it_is_taken():
    """Streams pause (chat_agent/urgency.py) while an `abort` waits in a socket's inbox: the
    socket's task that acts on it runs a pass of the event loop later, behind every stream."""
    urgency = Urgency()
    inbox = _Inbox(urgency)
    inbox.put_nowait(_text('{"type":"ping"}'))
    inbox.put_nowait(_text('{"type":"message","content":"' + "please do not abort " * 20 + '"}'))
    assert not urgency.pending  # not an abort; a long frame is not even looked at
    inbox.put_nowait(_text('{"type": "abort"}'))
    inbox.put_nowait(_text('{"type":"abort"}'))
    assert urgency.pending
    await inbox.get()
    await inbox.get()
    assert urgency.pending  # until the abort is taken: the hub holds its own urgency from there
    await inbox.get()
    assert not urgency.pending  # one hold for both aborts, ended once
    await inbox.get()
    assert not urgency.pending


async def test_an_abort_never_taken_stops_holding_the_streams_up():
    """The app stopped reading (its socket is closing): the hold ends by itself."""
    urgency = Urgency()
    inbox = _Inbox(urgency)
    inbox.put_nowait(_text('{"type":"abort"}'))
    assert urgency.pending
    await polled(lambda: not urgency.pending, LONGEST_PAUSE * 100)
    assert await inbox.get() == _text('{"type":"abort"}')
    assert not urgency.pending
