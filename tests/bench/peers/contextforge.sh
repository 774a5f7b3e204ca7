#!/usr/bin/env bash
# ContextForge (PyPI mcp-contextforge-gateway) in front of two stdio MCP servers, for
# bench/aggregators.rs: each server behind its own `mcpgateway.translate` bridge (stdio → Streamable HTTP;
# behind its SSE bridge, 15 of 16 concurrent calls failed with "MCP server error: "),
# both registered as gateways through the REST API, and one virtual server with all their
# tools. Writes the client endpoint's path to DIR/endpoint and a bearer token to DIR/token
# once it serves, then waits: the caller ends it (and everything it started, one process
# group) by killing the group.
#
# Usage: contextforge.sh VENV DIR PORT BRIDGE_PORT_1 BRIDGE_PORT_2 "EVERYTHING COMMAND" "TIME COMMAND"
# (registered as the gateways `everything` and `time`: tools `everything-echo`, ...)
set -euo pipefail
venv=$1 dir=$2 port=$3 bridge1=$4 bridge2=$5 server1=$6 server2=$7
mkdir -p "$dir" && cd "$dir" && rm -f mcp.db* endpoint token
# ContextForge refuses to start without strong secrets; these are made for this run only.
set -a
eval "$("$venv/bin/python" -m mcpgateway.scripts.init_secrets --stdout | grep '=')"
PLATFORM_ADMIN_EMAIL=admin@example.com
DATABASE_URL=sqlite:///$dir/mcp.db
MCPGATEWAY_UI_ENABLED=false
MCPGATEWAY_ADMIN_API_ENABLED=true
SSRF_ALLOW_LOCALHOST=true
LOG_LEVEL=ERROR
# Its rate limit (100 MCP requests a minute by default) would measure the limit, not the gateway.
RATE_LIMITING_ENABLED=false
set +a
"$venv/bin/python" -m mcpgateway.translate --stdio "$server1" --expose-streamable-http --host 127.0.0.1 --port "$bridge1" > bridge1.log 2>&1 &
"$venv/bin/python" -m mcpgateway.translate --stdio "$server2" --expose-streamable-http --host 127.0.0.1 --port "$bridge2" > bridge2.log 2>&1 &
"$venv/bin/mcpgateway" --host 127.0.0.1 --port "$port" > gateway.log 2>&1 &
until curl -sf -m1 -o /dev/null "127.0.0.1:$bridge1/healthz" && curl -sf -m1 -o /dev/null "127.0.0.1:$bridge2/healthz"; do sleep 0.1; done
until curl -sf -m1 -o /dev/null "127.0.0.1:$port/health"; do sleep 0.1; done
token=$("$venv/bin/python" -m mcpgateway.utils.create_jwt_token --username admin@example.com --exp 10080 --admin 2>/dev/null | tail -n1)
auth="Authorization: Bearer $token"
for gateway in "everything $bridge1" "time $bridge2"; do
  set -- $gateway
  curl -sf -X POST -H "$auth" -H 'Content-Type: application/json' \
    -d "{\"name\":\"$1\",\"url\":\"http://127.0.0.1:$2/mcp\",\"transport\":\"STREAMABLEHTTP\"}" \
    "http://127.0.0.1:$port/gateways" -o /dev/null
done
ids=$(curl -sf -H "$auth" "http://127.0.0.1:$port/tools?limit=0" | "$venv/bin/python" -c \
  'import json,sys; d=json.load(sys.stdin); d=d if isinstance(d,list) else d["items"]; print(json.dumps([t["id"] for t in d]))')
server=$(curl -sf -X POST -H "$auth" -H 'Content-Type: application/json' \
  -d "{\"server\":{\"name\":\"bench\",\"description\":\"bench\",\"associated_tools\":$ids}}" \
  "http://127.0.0.1:$port/servers" | "$venv/bin/python" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
printf '%s' "$token" > token.tmp && mv token.tmp token
printf '/servers/%s/mcp' "$server" > endpoint.tmp && mv endpoint.tmp endpoint
wait
