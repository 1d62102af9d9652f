"""Which teams may use each warehouse: the operator's grants, and the one rule both doors
apply (the API before it publishes a run, a runner before any dbt of a deploy or run).

The grants are the `teams` of each warehouse in the operator's warehouses file
(JETDBT_WAREHOUSES). A warehouse without `teams` serves every team, as the embedded
default `main` does; `teams: []` serves none. Only names and teams are read here: the
connections and their secrets stay the runners' (services/runner/setup/warehouses.py).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Annotated, Any

import msgspec
import yaml

__all__ = ["DEFAULT", "NotGranted", "Teams", "check", "entries", "load"]

DEFAULT = "main"
# A team as identity records it: a non-empty name. None: every team.
Teams = list[Annotated[str, msgspec.Meta(min_length=1, max_length=200)]] | None


class NotGranted(ValueError):
    """A team's project names a warehouse the operator did not grant to that team."""


def check(warehouse: str, team: str, teams: Collection[str] | None) -> None:
    """Raise NotGranted unless `team` may use `warehouse`, granted to `teams` (None: every
    team). The message names the warehouse and the team, never another team."""
    if teams is None or team in teams:
        return
    raise NotGranted(
        f"warehouse {warehouse!r} is not granted to team {team!r}: the operator grants a"
        f" warehouse to teams in JETDBT_WAREHOUSES ('teams' of {warehouse!r}); ask for"
        f" {team!r} to be added, or name a warehouse of your team (profile.warehouse)"
    )


def entries(path: Path) -> dict[str, dict[str, Any]]:
    """The warehouses file's entries, name to settings, as written (under `warehouses:`
    or at the top)."""
    raw = yaml.safe_load(Path(path).read_text()) or {}
    found = raw.get("warehouses", raw) if isinstance(raw, dict) else None
    if not isinstance(found, dict):
        raise ValueError(f"{Path(path).name}: expected a mapping of warehouse name to settings")
    out = {}
    for name, body in found.items():
        if body is not None and not isinstance(body, dict):
            raise ValueError(f"warehouse {name!r}: expected a mapping of settings")
        out[str(name)] = dict(body or {})
    return out


def load(path: Path | None) -> dict[str, list[str] | None]:
    """Each configured warehouse's teams (None: every team); with no file, the embedded
    default `main`, for every team."""
    if path is None:
        return {DEFAULT: None}
    grants = {}
    for name, body in entries(path).items():
        try:
            grants[name] = msgspec.convert(body.get("teams"), Teams)
        except msgspec.ValidationError as exc:
            raise ValueError(f"warehouse {name!r}: 'teams' {exc}") from None
    return grants
