"""A tool's input and output schemas, generated from what the OpenAPI document is made of.

The output schema is the JSON Schema of the route's answer Struct (`jetdbt.services.api.schemas`),
the input schema the route's parameters as `openapi.parameter` describes them plus the
properties of its request Struct. MCP wants an object at the root, so the Struct's own
definition is the root and every definition stays under `$defs`.
"""

from __future__ import annotations

import msgspec
from jetdbt.services.api import openapi

__all__ = ["REF", "object_schema", "route_input_schema", "operation"]

REF = "#/$defs/{name}"


def operation(method: str, route: str) -> openapi.Operation:
    """The document's operation of `method route`; a tool of a route the document does not
    describe is refused when the tools are built."""
    for op in openapi.OPERATIONS:
        if (op.method, op.path) == (method, route):
            return op
    raise LookupError(f"{method} {route} is not in openapi.OPERATIONS: describe it there first")


def object_schema(struct: type) -> dict:
    """`struct`'s JSON Schema with its own definition at the root."""
    (ref,), defs = msgspec.json.schema_components([struct], ref_template=REF)
    name = ref["$ref"].rsplit("/", 1)[-1]
    return {**defs[name], "$defs": defs}


def route_input_schema(op: openapi.Operation, params: tuple[str, ...]) -> dict:
    """The parameters `params` of `op` (path ones required) and the properties of its request
    Struct; nothing else is accepted."""
    properties: dict = {}
    required: list[str] = []
    for key in params:
        described = openapi.parameter(key)
        properties[described["name"]] = described["schema"]
        if described["required"]:
            required.append(described["name"])
    schema: dict = {"type": "object"}
    if op.request is not None:
        body = object_schema(op.request)
        properties.update(body["properties"])
        required += body.get("required", [])
        schema["$defs"] = body["$defs"]
    return {**schema, "properties": properties, "required": required, "additionalProperties": False}
