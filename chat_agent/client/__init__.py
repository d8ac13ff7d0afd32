"""Python client of the chat-agent WebSocket protocol (PROTOCOL.md), and its CLI.

    async with ChatClient(url, token=...) as client:
        done = await client.run_turn("hello")
"""

from .cli import main
from .connection import DEFAULT_URL, ChatClient
from .wire import parse_frame
from .errors import ChatError, ClientError, ConnectError, ConnectionLost, ProtocolMismatch
from .turn import TurnDone

__all__ = ["DEFAULT_URL", "ChatClient", "ChatError", "ClientError", "ConnectError", "ConnectionLost",
           "ProtocolMismatch", "TurnDone", "main", "parse_frame"]
