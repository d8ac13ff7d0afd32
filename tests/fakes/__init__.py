"""Test doubles that speak real wire protocols over loopback (no mocks).

`anthropic_fake.FakeAnthropic` is a fake Anthropic Messages API server; `exa_fake.FakeExa`
and `images_fake.FakeImages` share `loopback.LoopbackServer` for their thread and port.
"""
