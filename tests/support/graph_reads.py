"""A project's graph as the API serves it, for tests that check what a deploy or run left
in the graph."""

from __future__ import annotations

import urllib.parse

from tests.support.helpers import get_json, wait_for


async def project_graph(stack, project, version=None) -> dict:
    query = f"?version={urllib.parse.quote(version)}" if version else ""

    async def ready():
        status, body = await get_json(f"{stack.api_url}/v1/projects/{project}/graph{query}")
        return body if status == 200 and (version is None or body["version"] == version) else None

    return await wait_for(ready)
