"""The lighter pieces of uvicorn's WebSocket protocol (chat_agent/web/wsprotocol.py) keep the
behaviour uvicorn relies on: frames read in order, a reader woken by the next frame, sends
held while the write buffer is full and let go when it drains."""

from __future__ import annotations

import asyncio

from chat_agent.web.wsprotocol import _Gate, _Inbox


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
