"""Serve the fakes until killed, to try the real server by hand without any API key:

    python -m tests.fakes.serve                       # prints the environment to start server.py with
    python -m tests.fakes.serve --env-file fakes.env  # writes it too: python server.py --env-file fakes.env

Paste the printed `export` lines into the shell that runs `python server.py`, or start it with
`--env-file` and the file written here (docs/try-it.md).
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
    parser = argparse.ArgumentParser(description="Serve the fake Anthropic, Exa and images APIs until killed.")
    parser.add_argument("--env-file", metavar="PATH", help="also write the variables to this file, for "
                        "`python server.py --env-file PATH`")
    args = parser.parse_args(argv)
    anthropic = FakeAnthropic(keep_log=False).start()  # its log could not be read from here
    with FakeExa() as exa, FakeImages() as images:
        variables = {"ANTHROPIC_BASE_URL": anthropic.base_url, "ANTHROPIC_API_KEY": anthropic.api_key,
                     "EXA_BASE_URL": exa.base_url, "EXA_API_KEY": exa.api_key,
                     "CHAT_AGENT_IMAGE_API_BASE_URL": images.base_url, "CHAT_AGENT_IMAGE_API_KEY": images.api_key}
        if args.env_file:
            with open(args.env_file, "w", encoding="utf-8") as out:
                out.write("# The fake APIs of tests.fakes.serve (they live as long as it runs)\n")
                out.write("".join(f"{name}={value}\n" for name, value in variables.items()))
        print("\n".join(f"export {name}={value}" for name, value in variables.items()), flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            anthropic.stop()


if __name__ == "__main__":
    main()
