"""Internals of the Tool Registry; import the public API from `chat_agent.tools`."""
