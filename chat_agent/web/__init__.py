"""The WebSocket edge and the HTTP routes: the only modules that import Starlette."""
