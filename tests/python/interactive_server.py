"""A stdio MCP server on the official Python SDK whose tool asks its client to sample, and
which keeps notes in its process: what `instances = "per-client"` is for.

Run by tests/it/instances.rs and tests/bench/instances.rs as `python interactive_server.py`.
"""

import os
import warnings
from typing import Annotated

from mcp import types
from mcp.server.mcpserver import MCPServer, Resolve, Sample

# Sampling is deprecated in 2026-07-28; clients still answer it.
warnings.simplefilter("ignore")

server = MCPServer("py-interactive")
notes: list[str] = []


def sample(prompt: str) -> Sample:
    """The question `ask` puts to its client: mid-call on a handshake-era connection, in an
    `InputRequiredResult` on a 2026-07-28 one (the SDK follows the connection's era)."""
    return Sample(
        [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
        max_tokens=50,
    )


@server.tool()
async def ask(
    prompt: str, answer: Annotated[types.CreateMessageResult, Resolve(sample)]
) -> str:
    """Asks the calling client to sample an answer to `prompt`."""
    return f"the client answered: {answer.content.text}"


@server.tool()
def remember(note: str) -> str:
    """Keeps `note` in this process; returns every note kept so far."""
    notes.append(note)
    return ", ".join(notes)


@server.tool()
def pid() -> str:
    """This server's process id."""
    return str(os.getpid())


if __name__ == "__main__":
    server.run()
