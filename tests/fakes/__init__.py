"""Test doubles that speak real wire protocols over loopback (no mocks).

`anthropic_fake.FakeAnthropic` is a fake Anthropic Messages API server.
"""
