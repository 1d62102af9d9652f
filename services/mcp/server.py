"""The MCP server both transports run: tools filtered by the caller's role, each call made
to the API with the caller's own token, and the resources.

`credentials` gives a request's `Authorization` header value, sent to the API as it is:
`Bearer <the token jetdbt mcp was started with>` (stdio), or the header of the HTTP
request that carried the message.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import aiohttp
import jsonschema
import mcp_types as types
from jetdbt.services.mcp.api_client import Api, ApiRefused
from jetdbt.services.mcp.resources import RESOURCES
from jetdbt.services.mcp.tools import BY_NAME, TOOLS, Tool, allowed
from jetdbt.shared.process import logging as jlog
from jetdbt.shared.wording.short_quote import shorten
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST

__all__ = ["build_server", "whoami", "NAME", "INSTRUCTIONS"]

NAME = "jetdbt"
INSTRUCTIONS = (
    "jetdbt runs dbt projects as an event-sourced service. Start with list_projects;"
    " get_lineage and get_model describe a project's graph, get_model_health how a model is"
    " doing; show previews its rows and compile gives its SQL. start_run and retry_run return"
    " a run id at once: poll get_run until `finished_at` is set (its failed nodes come first,"
    " with dbt's message), and read get_run_logs. Every call speaks for your token; a refusal"
    " is the API's own. Read jetdbt://docs/security-model and jetdbt://docs/descriptor."
)
_MAX_ERROR = 600  # characters of an argument error quoted back
Credentials = Callable[[ServerRequestContext], str]


async def whoami(api: Api, auth: str) -> dict:
    return await api.call(auth, "GET", "/v1/whoami")


def _listed(tool: Tool) -> types.Tool:
    hints = types.ToolAnnotations(
        title=tool.title,
        read_only_hint=not tool.changes,
        destructive_hint=tool.destructive if tool.changes else None,
        idempotent_hint=tool.idempotent if tool.changes else None,
        open_world_hint=False,
    )
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        annotations=hints,
    )


# Built once: a tool's schemas never change while the server runs, and on the 2026 protocol
# every HTTP tool call checks its arguments against the listing.
_LISTED = {tool.name: _listed(tool) for tool in TOOLS}


def _refused(status: int | None, error: str) -> types.CallToolResult:
    """A tool's refusal: the API's `{"error": ...}` with its status, as text."""
    body = json.dumps({"status": status, "error": error})
    return types.CallToolResult(content=[types.TextContent(type="text", text=body)], is_error=True)


def _unreachable(api: Api, exc: Exception) -> str:
    return f"the API at {api.base_url} did not answer: {exc}"


def _argument_problem(tool: Tool, arguments: dict) -> str | None:
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(tool.input_schema).iter_errors(arguments)
    )
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path) or "the arguments"
    return shorten(f"tool {tool.name!r}: {where}: {error.message}", _MAX_ERROR)


def build_server(api: Api, credentials: Credentials) -> Server:
    log = jlog.get("mcp")

    async def role(ctx: ServerRequestContext) -> str:
        try:
            return (await whoami(api, credentials(ctx)))["role"]
        except ApiRefused as exc:
            raise MCPError(INVALID_REQUEST, exc.error) from None
        except aiohttp.ClientError as exc:
            raise MCPError(INTERNAL_ERROR, _unreachable(api, exc)) from None

    async def list_tools(ctx, params) -> types.ListToolsResult:
        have = await role(ctx)
        return types.ListToolsResult(tools=[_LISTED[t.name] for t in TOOLS if allowed(t, have)])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = BY_NAME.get(params.name)
        if tool is None:
            return _refused(404, f"no tool {params.name!r}; tools: {', '.join(BY_NAME)}")
        arguments: dict[str, Any] = params.arguments or {}
        problem = _argument_problem(tool, arguments)
        if problem is not None:
            return _refused(400, problem)
        try:
            answer = await tool.run(api, credentials(ctx), arguments)
        except ApiRefused as exc:
            log.info("tool_refused", tool=tool.name, status=exc.status)
            return _refused(exc.status, exc.error)
        except aiohttp.ClientError as exc:
            log.warning("api_unreachable", tool=tool.name, api=api.base_url, error=str(exc))
            return _refused(503, _unreachable(api, exc))
        text = json.dumps(answer)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=answer
        )

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=r.name, description=r.description,
                               mime_type=r.mime_type)
                for uri, r in RESOURCES.items()
            ]
        )  # fmt: skip

    async def read_resource(ctx, params: types.ReadResourceRequestParams):
        found = RESOURCES.get(str(params.uri))
        if found is None:
            known = ", ".join(RESOURCES)
            raise MCPError(INVALID_PARAMS, f"no resource {str(params.uri)!r}; known: {known}")
        try:
            text = found.text()
        except LookupError as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from None
        contents = types.TextResourceContents(uri=params.uri, text=text, mime_type=found.mime_type)
        return types.ReadResourceResult(contents=[contents])

    def input_schema(name: str) -> dict | None:
        return BY_NAME[name].input_schema if name in BY_NAME else None

    return Server(
        NAME,
        instructions=INSTRUCTIONS,
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
    )
