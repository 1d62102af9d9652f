"""Attack projects against the sandbox: files written as given, Python models whose message
is their verdict, and a build read back node by node (tests/with_dbt/test_sandbox.py,
test_egress_attacks.py)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from jetdbt.services.cli import client
from jetdbt.shared.bus import events as ev
from jetdbt.shared.bus.commands import BuildCommand, RunCommand

from tests.support.helpers import deploy_and_wait, get_json

__all__ = ["build_and_read", "verdict", "write_dedented"]


def write_dedented(folder: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(textwrap.dedent(text))
    return folder


def verdict(body: str) -> str:
    """A Python model that runs `body` (which sets `found`) and raises it as its message."""
    return (
        "def model(dbt, session):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "    if found is not None:\n"
        + "        raise RuntimeError('verdict: ' + repr(found))\n"
        + "    return session.sql('select 1 as id')\n"
    )


async def build_and_read(stack, folder: Path, name: str) -> tuple[ev.RunFinished, dict[str, dict]]:
    """Deploy `folder` as `name`, build it, and its nodes as the API answers them, by name."""
    await deploy_and_wait(stack.bus, folder, name)
    final = await client.run(stack.bus, name, RunCommand(command=BuildCommand()))
    assert isinstance(final, ev.RunFinished), final
    status, run = await get_json(f"{stack.api_url}/v1/runs/{final.run_id}")
    assert status == 200, run
    return final, {n["name"]: n for n in run["nodes"]}
