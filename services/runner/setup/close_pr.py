"""Closing a pull request's check: its schema dropped, with every relation in it.

Dropping needs the warehouse, so it is a run like any other, whose one invocation is
`dbt run-operation` of a macro the runner writes into the job's copy of the project. The
macro reads no argument: it drops `target.schema`, which the run's plan made the pull
request's own schema (`<schema>_pr_<n>`, shared/project/schema_names.py). Before it is written the
plan is checked to build there and nowhere else, so no command can make it drop another
schema. Each relation it drops is one log line (jetdbt.shared.bus.commands.CLOSE_PR_LINE), what
`jetdbt ci close` lists.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from jetdbt.shared.bus.commands import CLOSE_PR_LINE
from jetdbt.shared.project import bundle
from jetdbt.shared.project.schema_names import pr_schema

__all__ = ["MACRO", "problem", "write_macro"]

MACRO = "jetdbt_close_pr"

# adapter.drop_schema drops the schema with what it holds (`cascade`) when it exists, and
# commits it, on every adapter; the relations are listed first, from the warehouse itself.
_MACRO_TEXT = f"""\
{{% macro {MACRO}() %}}
  {{%- set schema = api.Relation.create(database=target.database, schema=target.schema) -%}}
  {{%- for row in list_relations_without_caching(schema) -%}}
    {{{{ log("{CLOSE_PR_LINE}" ~ row["schema"] ~ "." ~ row["name"], info=True) }}}}
  {{%- endfor -%}}
  {{%- do adapter.drop_schema(schema) -%}}
{{% endmacro %}}
"""


def problem(plan, pr: int) -> str | None:
    """Why the plan must not close pull request `pr`: it must build into that PR's own
    schema beside its environment's, and nowhere else."""
    home = plan.home
    if not pr or home is None or plan.scratch_schema is None:
        return (
            f"close_pr drops a pull request's own schema, and this run builds into"
            f" {plan.scratch_schema or 'its environment'}'s; it runs only as a pull request's"
            " check (a run with pr)"
        )
    wanted = pr_schema(home.schema, pr)
    if plan.scratch_schema != wanted:
        return (
            f"close_pr of pull request {pr} drops schema {wanted!r} only, and this run builds"
            f" into {plan.scratch_schema!r}"
        )
    return None


def write_macro(project: Path) -> str | None:
    """Write the macro into the job's project, in its first macro path; the reason it cannot
    be, or None."""
    try:
        doc = yaml.safe_load((project / "dbt_project.yml").read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        return f"dbt_project.yml cannot be read: {exc}"
    paths = doc.get("macro-paths") or ["macros"]
    first = paths[0] if isinstance(paths, list) and paths else None
    if not isinstance(first, str) or "{" in first:
        return "dbt_project.yml's macro-paths is not a list of plain folders"
    try:
        folder = project / bundle.check_path(first)
    except bundle.BundleRefused as exc:
        return f"dbt_project.yml's macro-paths: {exc}"
    target = folder / f"{MACRO}.sql"
    if project.resolve() not in target.resolve().parents:
        return f"dbt_project.yml's macro-paths {first!r} leads outside the project"
    folder.mkdir(parents=True, exist_ok=True)
    target.write_text(_MACRO_TEXT)
    return None
