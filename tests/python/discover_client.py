"""Drive a Wardgate gateway in search mode (tool_discovery = "search") with the official MCP
Python SDK, as an agent would: list, search, read one tool's schema, call it through
call_tool. Prints what it saw as JSON.

usage: discover_client.py WARDGATE CONFIG MODE
MODE is the SDK's `mode=`: "auto" or "legacy".
"""

import asyncio
import json
import sys

from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def main() -> None:
    wardgate, config, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    server = StdioServerParameters(command=wardgate, args=["--config", config])
    report = {}
    async with Client(server, mode=mode, read_timeout_seconds=30) as client:
        tools = await client.list_tools()
        report["tools"] = sorted(tool.name for tool in tools.tools)
        found = await client.call_tool("discover_tools", {"query": "add two numbers"})
        report["found"] = [tool["name"] for tool in found.structured_content["tools"]]
        best = report["found"][0]
        described = await client.call_tool("discover_tools", {"names": [best]})
        report["schema"] = described.structured_content["tools"][0]["inputSchema"]
        called = await client.call_tool("call_tool", {"name": best, "arguments": {"a": 20, "b": 22}})
        report["sum"] = called.structured_content["sum"]
        report["is_error"] = bool(called.is_error)
    print(json.dumps(report))


asyncio.run(main())
