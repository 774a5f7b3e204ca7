"""Drive a Wardgate gateway with the official MCP Python SDK and print what it saw as JSON.

usage: sdk_client.py (stdio WARDGATE CONFIG | http URL) MODE
MODE is the SDK's `mode=`: "auto" (tries server/discover for 2026-07-28, falls back to
initialize) or "legacy" (initialize handshake only).
"""

import asyncio
import json
import sys

from mcp import Client
from mcp import types
from mcp.client.stdio import StdioServerParameters


async def sampling(context, params):
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text="python sampled"),
        model="python-test",
    )


async def main() -> None:
    kind, target = sys.argv[1], sys.argv[2]
    if kind == "stdio":
        server = StdioServerParameters(command=target, args=["--config", sys.argv[3]])
        mode = sys.argv[4]
    else:
        server = target
        mode = sys.argv[3]
    report = {}
    async with Client(server, mode=mode, sampling_callback=sampling, read_timeout_seconds=30) as client:
        report["protocol"] = client.protocol_version
        report["server"] = client.server_info.name if client.server_info else None
        # Once, right after connecting, as scripts and agents do: no waiting, no re-listing.
        tools = await client.list_tools()
        report["tools"] = sorted(tool.name for tool in tools.tools)
        echo = await client.call_tool("s__echo", {"text": "from python"})
        report["echo"] = echo.content[0].text
        add = await client.call_tool("s__add", {"a": 20, "b": 22})
        report["structured"] = add.structured_content
        try:
            sample = await client.call_tool("s__sample", {"prompt": "hi"})
            report["sample"] = sample.content[0].text
            report["sample_is_error"] = bool(sample.is_error)
        except Exception as error:  # a 2026-07-28 client: no server-to-client requests
            report["sample"] = str(error)
            report["sample_is_error"] = True
        prompts = await client.list_prompts()
        report["prompts"] = sorted(prompt.name for prompt in prompts.prompts)
    print(json.dumps(report))


asyncio.run(main())
