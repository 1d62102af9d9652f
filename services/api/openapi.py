"""The API's contract: an OpenAPI 3.1 document generated from the Structs the routes return.

`OPERATIONS` says, per route, which Struct of `jetdbt.services.api.schemas` its success body
is and which error statuses it answers; the schemas themselves come from
`msgspec.json.schema_components`, the same types `schemas.shaped` converts every body
into, so the document and the answers cannot drift apart. A route registered on the
app without an entry here is still listed, marked as having no published shape.
`/openapi.json` serves the document, `/docs` a plain page rendered from it.

The document is also committed (`openapi.json` at the top of the repository), so a change
of the API shows as a diff to review; a test fails while the two differ, and
`python -m jetdbt.services.api.openapi_file` writes the committed copy again.
"""

from __future__ import annotations

import html
import re
import weakref
from typing import Any, NamedTuple, Union

import msgspec
from aiohttp import web
from jetdbt.services.api import schemas
from jetdbt.services.api.auth import PUBLIC
from jetdbt.services.api.boundary import MAX_OFFSET
from jetdbt.shared.blobs.artifacts import NAMES as ARTIFACTS
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import MAX_PR, JobCommand, PromoteCommand, RunCommand
from jetdbt.shared.jobs.webhooks import DELIVERY_STATES, HookRequest
from jetdbt.shared.project.bundle import MAX_BUNDLE_BYTES

__all__ = [
    "OPERATIONS",
    "UNDESCRIBED",
    "Operation",
    "document",
    "parameter",
    "render_html",
    "routes",
]

_REF = "#/components/schemas/{name}"
UNDESCRIBED = "(no published response shape yet)"
_ERRORS = {
    400: "a parameter or the body is malformed; the message names it",
    401: "no token, or a token that is unknown, revoked or expired",
    403: "the token's role or project scope does not allow this",
    404: "no such resource",
    410: "gone: retention removed it (the run's status and result remain)",
    409: "the resource is not in a state that allows this; the message says which",
    413: "the body is larger than the route accepts",
    500: "an unexpected failure; the API's log says why",
    503: "a service the route needs did not answer; the message names it",
}
_UNREAD = (
    "a request the HTTP server cannot read (a line past 8 KiB, a control character in a"
    " header) is refused in plain text before any route"
)
_PARAMS = {
    "project": ("path", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,127}$"}),
    "run_id": ("path", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,127}$"}),
    "job": ("path", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"}),
    "job:query": ("query", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"}),
    "hook": ("path", {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]{0,63}$"}),
    "state": ("query", {"type": "string", "enum": list(DELIVERY_STATES)}),
    "key": ("path", {"type": "string", "description": "a relation key, dbt://<wh>/<schema>/<n>"}),
    "unique_id": (
        "path",
        {
            "type": "string",
            "pattern": r"^[^.]+(\.[^.]+){2,}$",
            "description": "a dbt node id, <type>.<package>.<name>",
        },
    ),
    "name": ("path", {"type": "string", "enum": list(ARTIFACTS)}),
    "limit": ("query", {"type": "integer", "minimum": 1}),
    "offset": ("query", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET}),
    "after": ("query", {"type": "string", "description": "the last node id of the page before"}),
    "after:line": ("query", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET}),
    "follow": ("query", {"type": "string", "enum": ["true", "false", "1", "0"]}),
    "version": ("query", {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}),
    "projection": ("query", {"type": "string"}),
    "environment": (
        "query",
        {
            "type": "string",
            "pattern": "^[a-z][a-z0-9_-]{0,31}$",
            "description": "a project environment",
        },
    ),
    "pr": ("query", {"type": "integer", "minimum": 0, "maximum": MAX_PR}),
    "promote": ("query", {"type": "string", "enum": ["true", "false"]}),
    "replace_source": ("query", {"type": "string", "enum": ["true", "false"]}),
    "source": (
        "query",
        {"type": "string", "maxLength": 200, "description": "a source mark; repeated"},
    ),
    "Last-Event-ID": ("header", {"type": "string", "pattern": "^[0-9]{1,19}$"}),
}
_PAGE = ("limit", "offset")


class Operation(NamedTuple):
    """One route as the document describes it."""

    method: str
    path: str
    summary: str
    body: type | None  # the success body's Struct; None for a non-JSON answer
    status: int = 200
    params: tuple[str, ...] = ()
    errors: tuple[int, ...] = (400, 401, 403, 404)
    media: str = "application/json"
    request: type | None = None
    # A stream's events: each server-sent event's data is one of these.
    items: object = None
    # Another answer the same route gives on request (e.g. `?follow=true`), as text.
    also: str | None = None
    # A body of bytes, not JSON: what it is.
    upload: str | None = None


OPERATIONS = (
    Operation("GET", "/healthz", "Postgres and NATS reachable, every task alive", schemas.Health,
              errors=()),
    Operation("GET", "/v1/runs/{run_id}", "a run with every node, live while it runs",
              schemas.Run, params=("run_id",)),
    Operation("GET", "/v1/runs/{run_id}/events",
              "the run's run and node events as server-sent events: each `id` is the stream"
              " sequence, `Last-Event-ID` resumes after it, the stream ends with the run",
              None, params=("run_id", "Last-Event-ID"), media="text/event-stream",
              items=Union[ev.EVENT_TYPES]),  # noqa: UP007 - a runtime tuple
    Operation("POST", "/v1/runs/{run_id}/cancel",
              "cancel a run: a queued one never starts, a running one's dbt is killed",
              schemas.RunAccepted, status=202, params=("run_id",),
              errors=(400, 401, 403, 404, 409)),
    Operation("GET", "/v1/runs/{run_id}/logs",
              "a page of the run's log lines; `?follow=true` streams them as NDJSON to the end",
              schemas.RunLog, params=("run_id", "after:line", "limit", "follow"),
              errors=(400, 401, 403, 404, 410), also="application/x-ndjson"),
    Operation("GET", "/v1/runs/{run_id}/nodes/{unique_id}",
              "one node of a run: its compiled SQL, its thread, and its outcome and duration"
              " over its project's latest runs (`limit` of them)", schemas.RunNodeDetail,
              params=("run_id", "unique_id", "limit")),
    Operation("GET", "/v1/projects/{project}/nodes/{unique_id}/history",
              "a node's outcome and duration over its project's latest runs (`limit` of them),"
              " newest first", schemas.NodeHistories, params=("project", "unique_id", "limit"),
              errors=(400, 401, 403)),
    Operation("GET", "/v1/runs/{run_id}/artifacts/{name}",
              "dbt's manifest.json or run_results.json of the run's last invocation, byte for"
              " byte as dbt wrote them, while retention keeps the run's files (then a 404"
              " naming retention)", dict[str, Any], params=("run_id", "name")),
    Operation("GET", "/v1/runs/{run_id}/graph", "the graph a run used, a page of nodes",
              schemas.Graph, params=("run_id", "after", "limit")),
    Operation("GET", "/v1/whoami", "the token this request carries: principal, team, role,"
              " project pattern, expiry (never its secret)", schemas.Whoami, errors=(401,)),
    Operation("GET", "/v1/projects", "the projects the token may see: version, last run",
              schemas.Projects, params=_PAGE, errors=(400, 401, 403)),
    Operation("GET", "/v1/projects/{project}/runs", "a project's runs, newest first;"
              " `environment` keeps one environment's, `job` one saved job's", schemas.Runs,
              params=("project", "environment", "job:query", *_PAGE)),
    Operation("POST", "/v1/projects/{project}/runs", "publish a run command",
              schemas.RunAccepted, status=202, params=("project",), request=RunCommand),
    Operation("GET", "/v1/projects/{project}/jobs", "a project's saved jobs and their schedules",
              schemas.Jobs, params=("project", *_PAGE)),
    Operation("POST", "/v1/projects/{project}/jobs", "publish a job command: save, delete,"
              " schedule (cron with seconds, tz), pause, resume, unschedule",
              schemas.JobAccepted, status=202, params=("project",), request=JobCommand),
    Operation("POST", "/v1/projects/{project}/jobs/{job}/runs", "run a saved job now",
              schemas.RunAccepted, status=202, params=("project", "job")),
    Operation("GET", "/v1/projects/{project}/hooks", "a project's webhooks (never a secret)",
              schemas.Hooks, params=("project", *_PAGE)),
    Operation("POST", "/v1/projects/{project}/hooks", "add a webhook (its secret answered this"
              " once: 201) or remove one (200), through the notifier",
              schemas.HookAnswer, status=201, params=("project",), request=HookRequest,
              errors=(400, 401, 403, 404, 503)),
    Operation("GET", "/v1/projects/{project}/hooks/{hook}/deliveries",
              "a webhook's delivery attempts, newest first; `?state=dead`: the dead letters",
              schemas.HookDeliveries, params=("project", "hook", "state", *_PAGE)),
    Operation("GET", "/v1/projects/{project}/deploys", "a project's deploys, newest first",
              schemas.Deploys, params=("project", *_PAGE)),
    Operation("POST", "/v1/projects/{project}/deploys", "upload a bundle and publish its"
              " deploy command: promoted into `environment` (default: the default one), none"
              " with `promote=false`, a pull request's own slot with `pr`", schemas.DeployAccepted,
              status=202, params=("project", "environment", "promote", "pr", "replace_source",
              "source"), errors=(400, 401, 403, 413),
              upload=f"the bundle as `jetdbt` packs it, at most {MAX_BUNDLE_BYTES} bytes"),
    Operation("GET", "/v1/projects/{project}/retry-state",
              "per principal, the run a retry would resume", schemas.RetryStates,
              params=("project", *_PAGE)),
    Operation("GET", "/v1/projects/{project}/environments",
              "published environment states, with the run that published each",
              schemas.Environments, params=("project", *_PAGE)),
    Operation("GET", "/v1/projects/{project}/versions", "what each environment runs now (and"
              " each person's own, each pull request's check), and the promotion that put it",
              schemas.Versions, params=("project", "environment", *_PAGE)),
    Operation("GET", "/v1/projects/{project}/promotions", "promotions, newest first: who moved"
              " which environment from which version to which", schemas.Promotions,
              params=("project", "environment", *_PAGE)),
    Operation("POST", "/v1/projects/{project}/promotions", "publish a promote command: make an"
              " environment run a deployed version (the rollback too)",
              schemas.PromotionAccepted, status=202, params=("project",),
              request=PromoteCommand),
    Operation("GET", "/v1/projects/{project}/graph", "the latest (or `version`) graph, a page",
              schemas.Graph, params=("project", "version", "after", "limit")),
    Operation("GET", "/v1/projects/{project}/overlaps",
              "relations its latest version writes that other projects' latest versions write"
              " too, the first few per project (a project the token may not read: unnamed);"
              " `version` one deployed version's instead", schemas.Overlaps,
              params=("project", "version")),
    Operation("GET", "/v1/relations/{key}",
              "producers, readers, writes and the runs that built one relation", schemas.Relation,
              params=("key",)),
    Operation("GET", "/v1/projections", "each projection's checkpoint, lag and dead letters",
              schemas.Lags, errors=(401, 403)),
    Operation("GET", "/v1/dead-letters", "events a projection could not apply",
              schemas.DeadLetters, params=("projection", *_PAGE), errors=(400, 401, 403)),
    Operation("GET", "/metrics", "/v1/projections, the queue, runs finished by project and"
              " outcome, run and node duration histograms, in Prometheus text format", None,
              errors=(401, 403), media="text/plain"),
)  # fmt: skip


def parameter(key: str) -> dict:
    """`key` is a parameter's name, or `name:variant` where routes give one name two rules."""
    where, schema = _PARAMS[key]
    name = key.split(":")[0]
    return {"name": name, "in": where, "required": where == "path", "schema": schema}


def _content(media: str, ref: dict | None) -> dict:
    return {media: {"schema": ref if ref is not None else {"type": "string"}}}


def _event(data: dict) -> dict:
    """A server-sent event: `id` the stream sequence, `event` family.kind, `data` the JSON of
    the event as published (`contentSchema` says its shape)."""
    return {
        "type": "object",
        "required": ["id", "event", "data"],
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "event": {"type": "string"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": data,
            },
        },
    }


def _operation(op: Operation, refs: dict[type, dict]) -> dict:
    shape = refs.get(op.body) if op.items is None else _event(refs[op.items])
    ok = {"description": op.summary, "content": _content(op.media, shape)}
    if op.also is not None:
        ok["content"].update(_content(op.also, None))
    responses = {str(op.status): ok}
    if op.path == "/healthz":
        responses["503"] = {"description": "a part is down; `problems` names it", **ok}
    for status in (*op.errors, 500):
        if op.path in PUBLIC and status in (401, 403):
            continue
        err = {"application/json": {"schema": refs[schemas.ApiError]}}
        responses[str(status)] = {"description": _ERRORS[status], "content": err}
    # Before any route: the HTTP server's own refusal of a request it cannot read, in text.
    unread = responses.setdefault("400", {"description": _UNREAD, "content": {}})
    unread["content"]["text/plain"] = {"schema": {"type": "string", "description": _UNREAD}}
    out = {
        "summary": op.summary,
        "operationId": re.sub(r"[^a-zA-Z0-9]+", "_", f"{op.method} {op.path}").strip("_"),
        "parameters": [parameter(p) for p in op.params],
        "responses": responses,
    }
    if op.request is not None:
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": refs[op.request]}},
        }
    if op.upload is not None:
        raw = {"type": "string", "contentMediaType": "application/octet-stream"}
        out["requestBody"] = {
            "required": True,
            "description": op.upload,
            "content": {"application/octet-stream": {"schema": raw}},
        }
    if op.path in PUBLIC:
        out["security"] = []
    return out


def _undescribed(method: str, path: str) -> dict:
    """A route registered without an entry in OPERATIONS: listed, its body not described."""
    params = [
        {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
        for p in re.findall(r"{([^}:]+)", path)
    ]
    return {
        "summary": UNDESCRIBED,
        "parameters": params,
        "responses": {"default": {"description": "see docs/api.md"}},
    }


def document(app: web.Application | None = None) -> dict:
    """The OpenAPI 3.1 document: OPERATIONS, and every other route of `app` listed bare."""
    types = [schemas.ApiError, *{op.body for op in OPERATIONS if op.body is not None}]
    types += [op.request for op in OPERATIONS if op.request is not None]
    types += [op.items for op in OPERATIONS if op.items is not None]
    generated, components = msgspec.json.schema_components(types, ref_template=_REF)
    refs = dict(zip(types, generated, strict=True))
    paths: dict[str, dict] = {}
    for op in OPERATIONS:
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, refs)
    for route in app.router.routes() if app is not None else ():
        path = route.resource.canonical if route.resource is not None else ""
        method = route.method.lower()
        if not path.startswith(("/v1/", "/metrics")) or method == "head":
            continue
        paths.setdefault(path, {}).setdefault(method, _undescribed(method, path))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "jetdbt query API",
            "version": "1",
            "description": "Commands in, projections out. Every route but /healthz takes"
            " `Authorization: Bearer <token>`; every list is a page whose `next` says how to"
            ' ask for the following one. Errors are `{"error": ...}` naming what is wrong.',
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def render_html(doc: dict) -> str:
    """A readable page of the document: each operation, its parameters and its answers."""
    esc = html.escape
    parts = [
        "<!doctype html><meta charset=utf-8><title>jetdbt API</title>",
        "<style>body{font:14px system-ui;margin:2em;max-width:60em}code{background:#eee}"
        "h2{font-size:1em;margin-top:1.5em}</style>",
        f"<h1>{esc(doc['info']['title'])}</h1><p>{esc(doc['info']['description'])}</p>",
        "<p>The machine-readable contract: <a href=/openapi.json>/openapi.json</a>"
        " (OpenAPI 3.1).</p>",
    ]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            parts.append(f"<h2><code>{esc(method.upper())} {esc(path)}</code></h2>")
            parts.append(f"<p>{esc(op['summary'])}</p><ul>")
            for p in op["parameters"]:
                parts.append(f"<li>{esc(p['in'])} <code>{esc(p['name'])}</code></li>")
            for status, answer in op["responses"].items():
                shapes = [
                    c["schema"].get("$ref", "").rsplit("/", 1)[-1] or c["schema"].get("type", "")
                    for c in answer.get("content", {}).values()
                ]
                parts.append(
                    f"<li>{esc(status)}: {esc(answer['description'])}"
                    f" <code>{esc(', '.join(shapes))}</code></li>"
                )
            parts.append("</ul>")
    return "\n".join(parts)


routes = web.RouteTableDef()
# Each app's document as served, built at its first request (every route registered by then).
_BUILT: weakref.WeakKeyDictionary[web.Application, dict[str, bytes]] = weakref.WeakKeyDictionary()


def _built(app: web.Application) -> dict[str, bytes]:
    if app not in _BUILT:
        doc = document(app)
        _BUILT[app] = {"json": msgspec.json.encode(doc), "html": render_html(doc).encode()}
    return _BUILT[app]


@routes.get("/openapi.json")
async def openapi_json(request: web.Request) -> web.Response:
    return web.Response(body=_built(request.app)["json"], content_type="application/json")


@routes.get("/docs")
async def docs(request: web.Request) -> web.Response:
    return web.Response(body=_built(request.app)["html"], content_type="text/html", charset="utf-8")
