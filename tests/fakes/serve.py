"""Serve the fakes until killed, to try the real server by hand without any API key:

    python -m tests.fakes.serve            # prints the environment to start server.py with

Paste the printed `export` lines into the shell that runs `python server.py`.
The fake Anthropic answers from its default script (directives
like `[[tool NAME {json}]]` in a message make it call that tool).
"""

from __future__ import annotations

import argparse
import threading

from tests.fakes.anthropic_fake import FakeAnthropic
from tests.fakes.exa_fake import FakeExa
from tests.fakes.images_fake import FakeImages


def main(argv: list[str] | None = None) -> None:
    argparse.ArgumentParser(description="Serve the fake Anthropic, Exa and images APIs until killed.").parse_args(argv)
    anthropic = FakeAnthropic().start()
    with FakeExa() as exa, FakeImages() as images:
        print(f"export ANTHROPIC_BASE_URL={anthropic.base_url} ANTHROPIC_API_KEY={anthropic.api_key}\n"
              f"export EXA_BASE_URL={exa.base_url} EXA_API_KEY={exa.api_key}\n"
              f"export CHAT_AGENT_IMAGE_API_BASE_URL={images.base_url} CHAT_AGENT_IMAGE_API_KEY={images.api_key}",
              flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            anthropic.stop()


if __name__ == "__main__":
    main()
