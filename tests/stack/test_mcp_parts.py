"""The MCP door's parts that need no dbt: the tools' schemas against the OpenAPI document
(both come from the same Structs and parameter rules, and a tool whose schema drifts from
its route's fails here), the descriptor's resource, and /healthz naming a stopped server."""

from __future__ import annotations

import msgspec
from jetdbt.services.api import openapi
from jetdbt.services.mcp import tools
from jetdbt.services.mcp.tool_schemas import REF
from jetdbt.shared.bus.commands import MAX_SHOW_LIMIT
from jetdbt.shared.project.descriptor import Descriptor

from tests.support.helpers import get_json

_DOC = openapi.document()
_COMPONENTS = _DOC["components"]["schemas"]
_OPENAPI_REF = "#/components/schemas/"


def _resolved(schema, defs: dict, prefix: str):
    """`schema` with every `$ref` replaced by what it names, recursively, and a reference
    elsewhere (a discriminator's mapping) by the bare name."""
    if isinstance(schema, str):
        return schema.removeprefix(prefix)
    if isinstance(schema, list):
        return [_resolved(s, defs, prefix) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _resolved(defs[schema["$ref"].removeprefix(prefix)], defs, prefix)
    return {k: _resolved(v, defs, prefix) for k, v in schema.items() if k != "$defs"}


def _tool_side(schema: dict):
    return _resolved(schema, schema.get("$defs", {}), REF.format(name=""))


def _doc_side(schema: dict):
    return _resolved(schema, _COMPONENTS, _OPENAPI_REF)


def test_every_route_tool_has_its_routes_answer_as_output_and_its_parameters_as_input():
    checked = 0
    for tool in tools.TOOLS:
        if tool.op is None:
            continue
        op = _DOC["paths"][tool.op.path][tool.op.method.lower()]
        answer = op["responses"][str(tool.op.status)]["content"]["application/json"]["schema"]
        assert _tool_side(tool.output_schema) == _doc_side(answer), tool.name
        given = _tool_side(tool.input_schema)["properties"]
        for param in op["parameters"]:
            if param["name"] in given:
                assert given.pop(param["name"]) == param["schema"], (tool.name, param["name"])
            else:  # only a stream's parameters are left out
                assert param["name"] in ("follow", "Last-Event-ID"), (tool.name, param["name"])
        if "requestBody" in op:
            body = _doc_side(op["requestBody"]["content"]["application/json"]["schema"])
            assert given == body["properties"], tool.name
        else:
            assert given == {}, (tool.name, given)
        checked += 1
    assert checked >= 10


def test_tools_that_are_not_one_route_use_the_documents_shapes():
    """get_model's, get_model_health's and retry_run's parts are the API's Structs, as the
    document gives them; show's and compile's answers are their own (a run's id, status and
    rows or SQL), and show's `limit` is the show command's own bound."""
    for tool in tools.TOOLS:
        if tool.op is not None:
            continue
        defs = tool.output_schema["$defs"]
        shared = [name for name in defs if name in _COMPONENTS]
        assert shared or tool.name in ("show", "compile"), tool.name
        for name in shared:
            assert _tool_side({**defs[name], "$defs": defs}) == _doc_side(_COMPONENTS[name])
        for name, schema in tool.input_schema["properties"].items():
            if (tool.name, name) == ("show", "limit"):
                assert (
                    schema["maximum"] == MAX_SHOW_LIMIT
                    and "limit" not in tool.input_schema["required"]
                )
                continue
            assert name == "node" or schema == openapi.parameter(name)["schema"], (tool.name, name)


def test_a_drifted_struct_would_fail_the_check():
    """The comparison sees a difference: the tool side of another Struct is not the route's."""
    run = next(t for t in tools.TOOLS if t.name == "get_run")
    other = next(t for t in tools.TOOLS if t.name == "list_runs")
    op = _DOC["paths"][run.op.path]["get"]
    answer = op["responses"]["200"]["content"]["application/json"]["schema"]
    assert _tool_side(other.output_schema) != _doc_side(answer)


def test_tools_that_change_anything_need_a_runner_and_say_so():
    """show and compile start a run (not read-only) that writes nothing (not destructive)."""
    changing = {t.name for t in tools.TOOLS if t.changes}
    assert changing == {
        "start_run", "retry_run", "cancel_run", "run_job", "change_job", "show", "compile",
    }  # fmt: skip
    assert {t.name for t in tools.TOOLS if t.changes and not t.destructive} == {"show", "compile"}
    for tool in tools.TOOLS:
        posts = any(method == "POST" for method, _ in tool.routes)
        assert tool.changes == posts, tool.name
        if posts:
            assert tools.needed_role(tool) == "runner", tool.name
        assert tools.allowed(tool, "viewer") == (not posts)


def test_the_descriptor_resource_names_every_key_the_descriptor_takes():
    from jetdbt.services.mcp.resources import descriptor_doc

    doc = descriptor_doc()
    for field in msgspec.structs.fields(Descriptor):
        assert f"- `{field.name}`:" in doc
    assert "- `profile.warehouse`: string or null; default `null`" in doc
    assert "`retry_failed_nodes.attempts`: integer (at least 0, at most 10)" in doc


async def test_healthz_is_503_when_the_mcp_server_stopped(stack):
    """The MCP server is a task of the API's process like the others: /healthz names it."""
    status, _ = await get_json(f"{stack.api_url}/healthz")
    assert status == 200
    await stack._mcp.stop()
    status, body = await get_json(f"{stack.api_url}/healthz")
    assert status == 503 and body["problems"] == ["mcp http stopped"]
