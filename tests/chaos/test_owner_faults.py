"""The instance that owns a conversation fails while its turn streams (issue 21, DESIGN "A turn's
life"): killed (-9), or stalled (SIGSTOP) past its lease and woken again. And the paths a
client takes around an owner: `resume` on an instance that does not own the conversation,
a reconnect right after a `done`, and a model that says nothing for a while.

Real server processes on one PostgreSQL; what every client saw is checked against what the
store holds afterwards (`checker`).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time

import pytest

from tests.chaos.checker import Report, any_server, check, stored_pg
from tests.chaos.fleet import LONG, answering
from tests.chaos.recorder import Sock, Talk
from tests.conftest import SMALL_MODEL
from tests.fakes.anthropic_fake import Reply
from tests.instances import instances, moto, s3_env  # noqa: F401  (fixtures)

TAKE_OVER_WITHIN = 15.0  # seconds (DESIGN "A dead owner is noticed")


async def _owned_by(servers, owner: int, n: int, socks: list[Sock]) -> list[Talk]:
    """n conversations started on `owner` with a long reply streaming, each watched from every
    other instance."""
    talks = [Talk(await Sock.open(f"c{i}", servers, owner), servers, socks) for i in range(n)]
    socks += [t.sock for t in talks]
    for talk in talks:
        await talk.sock.send(type="message", content=f"{LONG} reply please")
    await asyncio.gather(*(t.sock.wait(lambda f: f["type"] == "content_chunk", timeout=60) for t in talks))
    for i, talk in enumerate(talks):
        for other in range(len(servers)):
            if other != owner:
                socks.append(await Sock.open(f"w{i}.{other}", servers, other, talk.sock.conversation))
    return talks


def _report(title: str, report: Report) -> Report:
    print(f"\n{title}:\n{report.summary()}")
    return report


async def _settle(socks: list[Sock], still: float = 2.0, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = max((s.frames[-1].at for s in socks if s.frames), default=0.0)
        if time.monotonic() - last >= still:
            return
        await asyncio.sleep(0.2)


@pytest.mark.timeout(240)
async def test_kill_9_of_an_owner_mid_turn(instances, launch, fake_anthropic):
    """Another instance closes the dead owner's turns within 15 s; clients on the others see
    each seq once and one `done` per turn, also in their next turn."""
    servers = launch(3, **instances.env)
    socks: list[Sock] = []
    with answering(fake_anthropic, delay=0.05):
        try:
            talks = await _owned_by(servers, 0, 6, socks)
            await asyncio.sleep(1)
            servers[0].stop(signal.SIGKILL)
            killed_at = time.monotonic()
            watchers = [s for s in socks if s.name.startswith("w")]
            ends = await asyncio.gather(*(w.wait(lambda f: f["type"] == "done", timeout=60) for w in watchers))
            took = max(w.frames[i].at - killed_at for w, (i, _) in zip(watchers, ends))
            # Each person comes back on another instance and goes on.
            again = [Talk(await Sock.open(f"{t.sock.name}#2", servers, 1 + n % 2, t.sock.conversation), servers,
                          socks) for n, t in enumerate(talks)]
            socks += [t.sock for t in again]
            taken = await asyncio.gather(*(t.until_taken("after the crash", time.monotonic() + 30) for t in again))
            await _settle(socks)
            stored = stored_pg(instances.url, any_server(servers), [t.sock.conversation for t in talks])
            report = _report(f"kill -9 of an owner (6 conversations, 3 instances; turns closed {took:.1f} s after)",
                             check(socks, stored, again, servers, killed=[servers[0]]))
        finally:
            await asyncio.gather(*(s.close() for s in socks), return_exceptions=True)
    assert report.clean, report.summary()
    assert took <= TAKE_OVER_WITHIN, f"the dead owner's turns were closed after {took:.1f} s"
    assert all(taken), "a conversation took no new turn after its owner died"


@pytest.mark.timeout(240)
async def test_sigstop_of_an_owner_past_its_lease(instances, launch, fake_anthropic):
    """The stalled owner's turns are closed by another instance; once woken it writes nothing
    more of them (its writes are fenced out), and its own sockets go on consistently."""
    lease = 2.0
    servers = launch(3, **instances.env, CHAT_AGENT_LEASE_SECONDS=str(lease))
    socks: list[Sock] = []
    stalled = servers[0]
    with answering(fake_anthropic, delay=0.05):
        try:
            talks = await _owned_by(servers, 0, 4, socks)
            await asyncio.sleep(1)
            stalled.proc.send_signal(signal.SIGSTOP)
            stopped_at = time.monotonic()
            try:
                watchers = [s for s in socks if s.name.startswith("w")]
                ends = await asyncio.gather(*(w.wait(lambda f: f["type"] == "done", timeout=60) for w in watchers))
                took = max(w.frames[i].at - stopped_at for w, (i, _) in zip(watchers, ends))
                await asyncio.sleep(lease)
            finally:
                stalled.proc.send_signal(signal.SIGCONT)
            await asyncio.sleep(3 * lease)  # it wakes, streams on from memory and tries to write
            taken = await asyncio.gather(*(t.until_taken("after the stall", time.monotonic() + 30) for t in talks))
            await _settle(socks)
            stored = stored_pg(instances.url, any_server(servers), [t.sock.conversation for t in talks])
            report = _report(f"SIGSTOP of an owner past its {lease:.0f} s lease (4 conversations, 3 instances; turns "
                             f"closed {took:.1f} s after)",
                             check(socks, stored, talks, servers))
        finally:
            await asyncio.gather(*(s.close() for s in socks), return_exceptions=True)
    assert report.clean, report.summary()
    assert took <= TAKE_OVER_WITHIN, f"the stalled owner's turns were closed after {took:.1f} s"
    assert all(taken), "a conversation took no new turn after its owner woke"


@pytest.mark.timeout(180)
async def test_resume_and_reconnect_on_an_instance_that_does_not_own_the_conversation(instances, launch,
                                                                                      fake_anthropic):
    """A client on B drops and resumes on B again and again while A streams: each seq once,
    none it already had; a reconnect right after `done` is shown a session at least as new."""
    servers = launch(2, **instances.env)
    socks: list[Sock] = []
    rng = random.Random(21)
    with answering(fake_anthropic, delay=0.03):
        try:
            talk = Talk(await Sock.open("a", servers, 0), servers, socks)
            socks.append(talk.sock)
            await talk.sock.send(type="message", content=f"{LONG} stream")
            await talk.sock.wait(lambda f: f["type"] == "content_chunk", timeout=60)
            cid = talk.sock.conversation
            resumed: list[tuple[Sock, int]] = []  # each socket after the first, with its afterSeq
            had = 0
            for k in range(1, 40):
                sock = await Sock.open(f"r#{k}", servers, 1, cid)
                socks.append(sock)
                if k > 1:
                    await sock.send(type="resume", afterSeq=had)
                    resumed.append((sock, had))
                try:
                    await sock.wait(lambda f: f["type"] == "done", timeout=rng.uniform(0.3, 1.2))
                    ended = True
                except TimeoutError:
                    ended = False
                await sock.close()
                had = max(had, sock.last_seq())  # (after closing: a frame may arrive meanwhile)
                if ended:
                    break
            # Straight after the `done`: a new socket's session holds it, and no turn runs.
            for k in range(3):
                sock = await Sock.open(f"r#after{k}", servers, 1, cid)
                socks.append(sock)
                assert sock.session["seq"] >= had and sock.session["running"] is False, (sock.session["seq"], had)
            await _settle(socks)
            stored = stored_pg(instances.url, any_server(servers), [cid])
            report = _report("resume on a non-owner", check(socks, stored, [talk], servers))
        finally:
            await asyncio.gather(*(s.close() for s in socks), return_exceptions=True)
    assert report.clean, report.summary()
    again = [f["seq"] for sock, after in resumed for f in sock.seq_frames() if f["seq"] <= after]
    assert not again, f"a resume sent seqs the client had told it it had: {again}"
    # (Order on each socket is the checker's: a resume may send what the `session` summed up
    # after live frames, docs/protocol.md.)
    client = [f["seq"] for s in socks if s.name.startswith("r#") and not s.name.startswith("r#after")
              for f in s.seq_frames()]
    assert len(client) == len(set(client)), "a seq twice across the client's reconnects"
    assert len(resumed) >= 3, "the turn ended before the client resumed a few times: nothing was tested"


@pytest.mark.timeout(120)
async def test_a_model_that_hangs_is_told_every_5_s_on_every_instance(instances, launch, fake_anthropic):
    """The model's API takes the request and sends nothing for 11 s: clients on the owner and
    on another instance get `status` `waiting_model` at least every ~5 s, then the reply."""
    servers = launch(2, **instances.env)
    socks: list[Sock] = []
    main = (lambda body: body.get("model") != SMALL_MODEL)
    try:
        talk = Talk(await Sock.open("a", servers, 0), servers, socks)
        socks.append(talk.sock)
        fake_anthropic.enqueue(Reply("hello"), when=main)
        first = await talk.ask("hello")
        assert first.stop == "end_turn"
        # After the title: the watcher's instance has then seen no frame of the conversation
        # before the hanging turn's statuses (none of its frames come before the model's).
        await talk.sock.wait(lambda f: f["type"] == "title", 0, 30)
        watcher = await Sock.open("w", servers, 1, talk.sock.conversation)
        socks.append(watcher)
        fake_anthropic.enqueue(Reply("Sorry for the wait.", lead_delay=11), when=main)
        start = (len(talk.sock.frames), len(watcher.frames))
        sent = time.monotonic()
        answer = await talk.ask("are you there?", timeout=60)
        await watcher.wait(lambda f: f["type"] == "done" and f["messageId"] == answer.message_id, start[1], 30)
        await _settle(socks)
        stored = stored_pg(instances.url, any_server(servers), [talk.sock.conversation])
        report = _report("model hang (11 s)", check(socks, stored, [talk], servers))
    finally:
        await asyncio.gather(*(s.close() for s in socks), return_exceptions=True)
    assert report.clean, report.summary()
    assert answer.stop == "end_turn"
    for sock, since in zip((talk.sock, watcher), start):
        told = [s.at for s in sock.frames[since:] if s.frame["type"] == "status"
                and s.frame.get("state") == "waiting_model" and s.frame.get("messageId") == answer.message_id]
        silences = [b - a for a, b in zip([sent, *told], told + [answer.first_frame_at])]
        assert len(told) >= 2 and max(silences) <= 7.5, (sock.name, [round(x, 1) for x in silences])
