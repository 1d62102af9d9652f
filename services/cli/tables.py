"""What `jetdbt status` prints: the API's answers as tables a person reads at a glance.

The columns are those of `dbt ls` and `dagster run list` users' habits: one row per run,
newest first, or a run's header and one row per node, failures first. Nothing is cut: a
name or id is printed whole, and a longer one only pushes its row's end out. `--json` and
`--yaml` print the API's answer itself, for scripts.
"""

from __future__ import annotations

from datetime import datetime

from jetdbt.services.cli.watch import cancelled_by, message_lines, no_nodes_note, printable
from jetdbt.shared.runs import run_status
from jetdbt.shared.runs.outcomes import attention
from jetdbt.shared.wording.short_quote import shorten

__all__ = ["projects_table", "runs_table", "run_table", "versions_table"]


def _when(text: str | None) -> str:
    """An API time (ISO 8601, UTC) as `2026-01-31 14:05:09`; empty when not yet."""
    if not text:
        return ""
    return datetime.fromisoformat(text).strftime("%Y-%m-%d %H:%M:%S")


def _took(run: dict) -> str:
    if not run.get("started_at") or not run.get("finished_at"):
        return ""
    began = datetime.fromisoformat(run["started_at"])
    seconds = (datetime.fromisoformat(run["finished_at"]) - began).total_seconds()
    return f"{seconds:.1f}s"


def _counts(run: dict) -> str:
    """Outcome counts, what needs a look first: `1 failed, 18 passed`."""
    totals = run.get("totals") or {}
    shown = [(k, v) for k, v in totals.items() if v]
    shown.sort(key=lambda kv: attention(kv[0]))
    return ", ".join(f"{v} {k}" for k, v in shown)


def _last_line(text: str | None) -> str:
    """The line of an error that says why (dbt's last)."""
    lines = (text or "").strip().splitlines()
    return lines[-1] if lines else ""


def _label(run: dict) -> str:
    return str((run.get("command") or {}).get("label") or "")


def _environment(run: dict) -> str:
    """The environment a run builds in, and the pull request it checks."""
    pr = run.get("pr") or 0
    return str(run.get("environment") or "") + (f" pr {pr}" if pr else "")


def runs_table(answer: dict, environment: str = "") -> str:
    """A project's runs (GET /v1/projects/{project}/runs), one row each; `environment`
    the one they were kept to."""
    runs = answer.get("runs") or []
    if not runs:
        where = f" in environment {environment}" if environment else ""
        return f"project {answer.get('project')} has no runs{where} yet"
    head = (
        "run id", "status", "env", "command", "job", "trigger", "requested by", "started", "took",
        "nodes",
    )  # fmt: skip
    rows = [
        (
            r["run_id"],
            r["status"],
            _environment(r),
            _label(r),
            r.get("job") or "",
            r.get("trigger") or "",
            r.get("requested_by") or "",
            _when(r.get("started_at") or r.get("requested_at")),
            _took(r),
            _counts(r) or r.get("refused_reason") or r.get("queue_reason") or "",
        )
        for r in runs
    ]
    lines = [printable(line) for line in _columns(head, rows)]
    if answer.get("next"):
        offset = answer["next"].get("offset")
        env = f" --env {environment}" if environment else ""
        lines.append(
            f"older runs: jetdbt status --project {answer['project']}{env} --offset {offset}"
        )
    return "\n".join(lines)


def projects_table(answer: dict) -> str:
    """The projects a token may see (GET /v1/projects): what each runs, its last deploy and
    its last run; under the table, why each project's last deploy failed."""
    projects = answer.get("projects") or []
    if not projects:
        return "no project deployed yet (jetdbt deploy PATH)"
    head = ("project", "version", "deployed", "last deploy", "last run", "outcome", "finished")
    rows = [
        (
            p["project"],
            (p.get("version") or "-")[:19],
            _when(p.get("deployed_at")),
            p.get("last_deploy_status") or "",
            p.get("last_run_id") or "",
            p.get("last_run_status") or "",
            _when(p.get("last_run_finished_at")),
        )
        for p in projects
    ]
    lines = _columns(head, rows)
    for p in projects:
        if p.get("last_deploy_status") == "failed":
            why = _first_line(p.get("last_deploy_reason")) or "no reason recorded"
            lines.append(f"{p['project']}: deploy {p.get('last_deploy_id')} failed: {why}")
    if answer.get("next"):
        lines.append(f"more projects: jetdbt projects --offset {answer['next'].get('offset')}")
    return "\n".join(printable(line) for line in lines)


def _first_line(text: str | None) -> str:
    """A reason's first line that says something, bounded."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return shorten(lines[0], 300) if lines else ""


def run_table(run: dict) -> str:
    """One run (GET /v1/runs/{run_id}): what it is and how it ended, then every node."""
    result = run.get("result") or {}
    lines = [
        f"run {run['run_id']} of {run['project']}: {run['status']}"
        + cancelled_by(run["status"], result.get("cancelled_by"))
        + (f" ({_counts(run)})" if _counts(run) else ""),
    ]
    facts = [
        ("command", _label(run)),
        ("requested by", run.get("requested_by") or ""),
        ("job", run.get("job") or ""),
        ("trigger", run.get("trigger") or ""),
        ("environment", _environment(run)),
        ("version", (run.get("version") or "")[:19]),
        ("attempt", str(run.get("attempt") or "")),
        ("started", _when(run.get("started_at"))),
        ("finished", _when(run.get("finished_at"))),
        ("took", _took(run)),
        ("queued", run.get("queue_reason") or ""),
        ("refused", run.get("refused_reason") or ""),
        ("error", _last_line(result.get("error"))),
    ]
    for name, value in facts:
        if value:
            lines.append(f"  {name + ':':<14}{value}")
    nodes = sorted(
        run.get("nodes") or [],
        key=lambda n: (attention(n.get("outcome")), n["unique_id"]),
    )
    note = no_nodes_note(run["status"], nodes) if run["status"] in run_status.RESULTS else None
    if note:
        lines += ["", note]
    if nodes:
        head = ("outcome", "dbt status", "type", "node", "rows", "time")
        rows = [
            (
                n.get("outcome") or "",
                n["status"],
                n.get("resource_type") or "",
                n.get("name") or n["unique_id"],
                "" if n.get("rows_affected") is None else str(n["rows_affected"]),
                "" if n.get("execution_time") is None else f"{n['execution_time']:.2f}s",
            )
            for n in nodes
        ]
        lines.append("")
        lines += _columns(head, rows, right={4, 5})
        for n in nodes:
            if n.get("outcome") in ("failed", "warned") and n.get("message"):
                said = message_lines(n["message"])
                lines += ["", f"{n.get('name')}: {said[0]}", *(f"  {line}" for line in said[1:])]
    return "\n".join(printable(line) for line in lines)


def _columns(head: tuple, rows: list[tuple], right: frozenset | set = frozenset()) -> list[str]:
    """Rows under a header, each column as wide as its widest cell."""
    widths = [max(len(str(c)) for c in col) for col in zip(head, *rows, strict=True)]

    def line(cells) -> str:
        out = [
            f"{c:>{w}}" if i in right else f"{c:<{w}}"
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "  ".join(out).rstrip()

    return [line(head), *(line(r) for r in rows)]


def versions_table(answer: dict, key: str = "versions") -> str:
    """What each slot runs (or, with `key` "promotions", each promotion, newest first): the
    slot, the version and the one before it, when and by whom."""
    rows = [
        (
            r["slot"],
            r["version"][:19],
            r["previous"][:19] or "-",
            _when(r["promoted_at"]),
            printable(r["promoted_by"]),
            f"deploy {r['deploy_id']}" if r["deploy_id"] else "promote",
        )
        for r in answer[key]
    ]
    if not rows:
        return f"{answer['project']}: nothing promoted yet (jetdbt deploy PATH)"
    head = ("ENVIRONMENT", "VERSION", "PREVIOUS", "PROMOTED", "BY", "VIA")
    return "\n".join(_columns(head, rows))
