"""The warehouse grants at the API's door: a run of a project whose team may not use the
warehouse its current version names is a 403 before anything is published.

The warehouse is the one the version the project's default environment runs recorded
(shared/slot_versions.py) and the team the one its deploys recorded, both read from the log as a
runner reads them; the grants are the operator's warehouses file
(shared/identity/warehouse_grants.py).
A run in another environment may build in another warehouse, which only the version's
descriptor names: the runner, which plans every run in its environment and knows every
warehouse it serves, checks the grant again and refuses; so does it for a warehouse this API
was not told of.
"""

from __future__ import annotations

from aiohttp import web
from jetdbt.services.api.boundary import error
from jetdbt.services.api.keys import BUS
from jetdbt.shared.bus import events as ev
from jetdbt.shared.identity import principals, warehouse_grants
from jetdbt.shared.project import slot_versions
from jetdbt.shared.project.descriptor import DEFAULT_ENVIRONMENT

__all__ = ["install", "refusal"]

_GRANTS = web.AppKey("grants", dict)


def install(app: web.Application, grants: dict[str, list[str] | None]) -> None:
    app[_GRANTS] = grants


async def refusal(request: web.Request, project: str) -> web.Response | None:
    """A 403 naming the warehouse and the team when `project`'s team may not use the
    warehouse of its current version, else None."""
    bus, grants = request.app[BUS], request.app[_GRANTS]
    deployed = await slot_versions.held_by(bus, project, DEFAULT_ENVIRONMENT)
    if not isinstance(deployed, ev.Deployed) or deployed.warehouse not in grants:
        return None
    team = await principals.project_team(bus, project)
    try:
        warehouse_grants.check(deployed.warehouse, team, grants[deployed.warehouse])
    except warehouse_grants.NotGranted as exc:
        return error(403, str(exc))
    return None
