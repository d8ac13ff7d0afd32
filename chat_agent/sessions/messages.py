"""What instances of the server tell each other, as typed messages: one discriminated union,
one adapter, like the wire frames of `protocol`.

Broadcast to every instance: the frames an owner committed (`Frames`), a conversation's
deletion (`Deleted`), and a turn's live status (`Status`, never stored). Sent to one
instance: a client's command forwarded to the conversation's owner (`Command`), a background
job handed to it (`RunJob`), and the owner's `Answer` to either.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

# One committed frame: (seq, turn id, frame type, frame text). A tuple, not a model: a busy
# owner publishes thousands a second, and followers only compare seqs and pass the text on.
Committed = tuple[int, "str | None", str, str]


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True)


class Frames(_Message):
    """Frames of one conversation its owner committed, in seq order."""

    kind: Literal["frames"] = "frames"
    conversation: str
    instance: str  # the owner that committed them
    frames: list[tuple[int, str | None, str, str]]


class Deleted(_Message):
    kind: Literal["deleted"] = "deleted"
    conversation: str


class Status(_Message):
    """A `status` frame of a running turn (informational, no seq) for sockets elsewhere."""

    kind: Literal["status"] = "status"
    conversation: str
    turn: str | None = None  # the owner's running turn it is of: not shown once that turn is over
    # The newest seq the owner had logged when it told it: a listener shown a later frame
    # (its turn's `done`, say, read from the store on opening) is past it. None from an
    # instance of an earlier version, during a rolling restart.
    seq: int | None = None
    text: str


class Command(_Message):
    """A client frame for the conversation's owner to run and answer."""

    kind: Literal["command"] = "command"
    id: str  # the request: its answer carries it
    sender: str  # the instance waiting for the answer
    conversation: str
    user: str  # the conversation's owner (the user)
    frame: dict[str, Any]
    echo: bool = False  # a refusal is answered to the sender too (see `Commands.command`)
    trace: dict[str, str] | None = None  # the sender's trace context: one trace across both


class RunJob(_Message):
    """A background job that writes the conversation (its title), for its owner to run."""

    kind: Literal["job"] = "job"
    id: str
    sender: str
    conversation: str
    user: str
    job: str


class Answer(_Message):
    kind: Literal["answer"] = "answer"
    id: str = ""
    # ok; rejected (answer the client with code and message); not_owner (ask again)
    status: Literal["ok", "rejected", "not_owner"]
    code: str = ""
    message: str = ""


Request = Command | RunJob
BusMessage = Annotated[Union[Frames, Deleted, Status, Command, RunJob, Answer], Field(discriminator="kind")]
bus_messages: TypeAdapter[BusMessage] = TypeAdapter(BusMessage)


class Resync(_Message):
    """Not a message: the bus says its listener connection was lost and is back, so frames
    may have been missed meanwhile (read them from the event log)."""

    kind: Literal["resync"] = "resync"


Arrival = Frames | Deleted | Status | Command | RunJob | Answer | Resync
