"""POST a bundle to deploy it: the door of a CI system that has an API token and no NATS user.

The API does what the CLI does over NATS: it stores the bundle (its digest is the version),
records the upload under a deploy id it makes (shared/project/uploads.py: a runner deploys only the
digest its deploy's record names) and publishes the deploy command as the token's
principal. The runner checks the token's role, the record and the bundle again, so a body
that is no bundle ends in deploy.refused with the runner's reason. The body is read up to
MAX_BUNDLE_BYTES and no further.
"""

from __future__ import annotations

import uuid

import msgspec
from aiohttp import web
from jetdbt.services.api import auth, schemas
from jetdbt.services.api.boundary import error, path, query, respond
from jetdbt.services.api.keys import BUS
from jetdbt.shared.blobs.digests import digest_of
from jetdbt.shared.bus.commands import DeployCommand
from jetdbt.shared.project import uploads
from jetdbt.shared.project.bundle import MAX_BUNDLE_BYTES
from jetdbt.shared.wording.short_quote import shorten

__all__ = ["routes"]

_CHUNK = 64 * 1024
# The query parameters that are the deploy command's own fields.
_FIELDS = ("environment", "promote", "pr", "replace_source")

routes = web.RouteTableDef()


def _asked(request: web.Request, project: str, principal: str) -> DeployCommand | str:
    """The deploy command the query asks for, its bundle not stored yet; or why it is not one."""
    fields = {name: query(request, name) for name in _FIELDS if query(request, name) is not None}
    fields["source"] = request.query.getall("source", [])
    try:
        return msgspec.convert(
            {**fields, "bundle_digest": digest_of(b""), "bundle_size": 0},
            DeployCommand,
        )
    except msgspec.ValidationError as exc:
        return f"the deploy of {project!r} as asked by {principal!r}: {shorten(str(exc), 300)}"


async def _bounded(request: web.Request) -> bytes | None:
    """The body, or None once it is longer than MAX_BUNDLE_BYTES (read no further)."""
    if (request.content_length or 0) > MAX_BUNDLE_BYTES:
        return None
    body = bytearray()
    async for chunk in request.content.iter_chunked(_CHUNK):
        body += chunk
        if len(body) > MAX_BUNDLE_BYTES:
            return None
    return bytes(body)


@routes.post("/v1/projects/{project}/deploys")
async def post_deploy(request: web.Request) -> web.Response:
    project = path(request, "project")
    token = auth.token_of(request)
    asked = _asked(request, project, token.principal)
    if isinstance(asked, str):
        return error(400, asked)
    data = await _bounded(request)
    if data is None:
        return error(413, f"a bundle is at most {MAX_BUNDLE_BYTES} bytes")
    if not data:
        return error(400, "the body is empty: send the bundle `jetdbt` packs")
    bus = request.app[BUS]
    digest = await bus.put_blob(data)
    deploy_id = uuid.uuid4().hex
    await uploads.record(bus, deploy_id, digest)
    cmd = msgspec.structs.replace(
        asked,
        bundle_digest=digest,
        bundle_size=len(data),
        deploy_id=deploy_id,
        requested_by=token.principal,
    )
    ack = await bus.publish_command(
        "deploy", project, cmd, deploy_id, principal=token.principal, token_id=token.id
    )
    accepted = schemas.DeployAccepted(
        deploy_id=deploy_id, project=project, bundle_digest=digest, command_id=f"c{ack.seq}"
    )
    return respond(accepted, status=202)
