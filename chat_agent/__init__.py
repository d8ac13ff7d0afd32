"""chat-agent: a tool-using agent behind a WebSocket, for canvas UIs.

The public API is small: `create_app` builds the Starlette app, `Settings` configures it.
Both are imported lazily so that `chat_agent.client` and `chat_agent.protocol` stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .web.app import create_app
    from .config import Settings

__all__ = ["create_app", "Settings", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .web.app import create_app
        return create_app
    if name == "Settings":
        from .config import Settings
        return Settings
    raise AttributeError(name)
