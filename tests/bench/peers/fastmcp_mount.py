"""FastMCP (PyPI fastmcp 4.2.3) as an aggregator, for bench/aggregators.rs: two stdio MCP
servers mounted behind one Streamable HTTP endpoint, http://127.0.0.1:PORT/mcp, their tools
named NAMESPACE_TOOL.

Usage: python fastmcp_mount.py PORT SERVER_EVERYTHING_JS MCP_SERVER_TIME
"""
import sys
from fastmcp import FastMCP
from fastmcp.server import create_proxy

EVERYTHING, TIME = sys.argv[2], sys.argv[3]
port = int(sys.argv[1])

main = FastMCP("fastmcp-mount")
main.mount(create_proxy({"mcpServers": {"everything": {"command": "node", "args": [EVERYTHING, "stdio"]}}},
                        name="everything"), namespace="everything")
main.mount(create_proxy({"mcpServers": {"time": {"command": TIME, "args": []}}},
                        name="time"), namespace="time")

if __name__ == "__main__":
    main.run(transport="http", host="127.0.0.1", port=port, path="/mcp", show_banner=False)
