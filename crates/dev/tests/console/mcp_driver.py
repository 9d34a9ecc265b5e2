"""A real MCP client for the tests: the official Python SDK (`pip install mcp`) driving
`countersign mcp` over stdio, controlled by the Rust test through this process's stdin/stdout.

Usage: mcp_driver.py [--elicit-url] ERRLOG SERVER [ARGS...]. The server is started with this
process's whole environment, its standard error written to ERRLOG. With --elicit-url the client
declares elicitation (form and URL modes, MCP 2025-11-25) and accepts every elicitation, printing
it first. This process prints one JSON line per event:

  {"event": "ready", "server": {...}, "instructions": "..."}   once initialized
  {"id": N, "tools": [{"name", "description", "input_schema"}]}   answer to {"id": N, "op": "list_tools"}
  {"id": N, "progress": {"progress", "message"}}                  while {"id": N, "op": "call", ...} runs
  {"id": N, "result": {"text", "structured", "is_error"}}         its result
  {"id": N, "error": "..."}                                       a protocol error
  {"event": "elicitation", "mode", "message", "url", "elicitation_id"}   an elicitation (--elicit-url)
  {"event": "closed"}                                             after {"op": "close"} or the end of input:
                                                                  the server's stdin closed and it exited

Calls run side by side: a call may wait for a person while the test sends the next line.
"""

import json
import sys

import anyio
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def texts(result):
    out = []
    for block in result.content:
        t = getattr(block, "text", None)
        if t is not None:
            out.append(t)
    return "\n".join(out)


async def call(session, msg):
    rid = msg["id"]

    async def progress(p, total, message):
        emit({"id": rid, "progress": {"progress": p, "message": message}})

    try:
        result = await session.call_tool(
            msg["tool"],
            msg.get("args") or {},
            read_timeout_seconds=msg.get("timeout"),
            progress_callback=progress,
        )
        emit(
            {
                "id": rid,
                "result": {
                    "text": texts(result),
                    "structured": result.structured_content,
                    "is_error": result.is_error,
                },
            }
        )
    except Exception as e:  # a protocol error: the test sees it
        emit({"id": rid, "error": f"{type(e).__name__}: {e}"})


async def list_tools(session, msg):
    try:
        result = await session.list_tools()
        emit(
            {
                "id": msg["id"],
                "tools": [
                    {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                    for t in result.tools
                ],
            }
        )
    except Exception as e:
        emit({"id": msg["id"], "error": f"{type(e).__name__}: {e}"})


async def elicited(context, params):
    emit(
        {
            "event": "elicitation",
            "mode": params.mode,
            "message": params.message,
            "url": getattr(params, "url", None),
            "elicitation_id": getattr(params, "elicitation_id", None),
        }
    )
    return types.ElicitResult(action="accept")


async def main():
    argv = sys.argv[1:]
    elicit = argv[:1] == ["--elicit-url"]
    if elicit:
        argv = argv[1:]
    errlog_path, command, args = argv[0], argv[1], argv[2:]
    import os

    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    callbacks = {"elicitation_callback": elicited} if elicit else {}
    with open(errlog_path, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **callbacks) as session:
                init = await session.initialize()
                emit(
                    {
                        "event": "ready",
                        "server": {"name": init.server_info.name, "version": init.server_info.version},
                        "protocol": str(init.protocol_version),
                        "instructions": init.instructions,
                    }
                )
                lines = anyio.wrap_file(sys.stdin)
                async with anyio.create_task_group() as tg:
                    async for line in lines:
                        line = line.strip()
                        if not line:
                            continue
                        msg = json.loads(line)
                        op = msg.get("op")
                        if op == "close":
                            break
                        if op == "list_tools":
                            tg.start_soon(list_tools, session, msg)
                        elif op == "call":
                            tg.start_soon(call, session, msg)
                    tg.cancel_scope.cancel()
    emit({"event": "closed"})


if __name__ == "__main__":
    anyio.run(main)
