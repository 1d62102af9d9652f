"""The run viewer's static files under /ui, on the API's own port.

The files hold no data: every page reads the API with the caller's bearer token, so
they are served without one. `make ui` builds them into ui/dist (esbuild bundles the
layout libraries in: nothing is fetched from elsewhere at run time), and a wheel carries
them as services/api/viewer. A stack started from a checkout without the build answers
/ui with a 503 naming the command.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web
from jetdbt.services.api.boundary import error
from jetdbt.services.api.keys import UI_DIST

__all__ = ["DIST", "UI_PATHS", "routes"]

# An installed wheel carries the built viewer beside this module (setup.py); a checkout
# serves what `make ui` built.
_PACKAGED = Path(__file__).resolve().parent / "viewer"
DIST = _PACKAGED if _PACKAGED.is_dir() else _PACKAGED.parent.parent.parent / "ui" / "dist"
# The page's script, the modules it imports (cytoscape; dagre for small graphs), the
# worker that reads a run's event stream, and its style: nothing else is served from DIST.
_ASSETS = {
    "app.js": "text/javascript",
    "graph.js": "text/javascript",
    "dagre.js": "text/javascript",
    "follow.js": "text/javascript",
    "style.css": "text/css",
}
# Every route this module serves (the auth middleware lets them through without a token).
UI_PATHS = ("/ui", "/ui/", *(f"/ui/{name}" for name in _ASSETS))
# Scripts and data from this origin only: nothing from elsewhere, no inline script; the
# graph library sets inline styles.
_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline';"
    " img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"
)
_NOT_BUILT = "the run viewer is not built: run `make ui`, then reload"


def _read(dist: Path, name: str) -> web.Response:
    try:
        body = (dist / name).read_bytes()
    except FileNotFoundError:
        return error(503, _NOT_BUILT)
    kind = _ASSETS.get(name, "text/html")
    return web.Response(
        body=body,
        content_type=kind,
        charset="utf-8",
        headers={
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": _POLICY,
        },
    )


async def _ui(request: web.Request) -> web.Response:
    """The page at /ui/ (/ui redirects there), or one of its assets, from the app's UI_DIST."""
    served = request.match_info.route.resource.canonical  # the one of UI_PATHS matched
    if served == "/ui":
        raise web.HTTPFound("/ui/")
    return _read(request.app[UI_DIST], served.removeprefix("/ui/") or "index.html")


routes = web.RouteTableDef()
for _path in UI_PATHS:
    routes.get(_path)(_ui)
