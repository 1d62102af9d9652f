"""What one dbt invocation will be: the descriptor and the command folded into one plan.

Deploys and runs both go through `make_plan`, so a parse at deploy and a build
see the same profile, target, environment and vars.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2.sandbox
import msgspec
import yaml
from jetdbt.services.runner.egress.hosts import (
    EgressPolicy,
    parse_endpoint,
    policy_for,
    profile_endpoint,
)
from jetdbt.services.runner.process.dbt_env import dbt_env
from jetdbt.services.runner.setup import close_pr, run_credentials
from jetdbt.services.runner.setup.own_database import OwnDatabase, Place, place_of_output
from jetdbt.services.runner.setup.secrets import Resolver
from jetdbt.services.runner.setup.selectors import (
    STATE_METHODS,
    STATE_READERS,
    compares_state,
    selection_methods,
)
from jetdbt.services.runner.setup.warehouses import (
    Warehouse,
    render_output,
    render_profiles,
    schema_of,
)
from jetdbt.shared.bus.commands import ClosePrCommand, DbtCommand, OperationCommand, ShowCommand
from jetdbt.shared.project import bundle
from jetdbt.shared.project.arguments import TAKES, check_value
from jetdbt.shared.project.descriptor import (
    Descriptor,
    interpolate,
    is_dynamic,
    placeholders,
    without_placeholders,
)
from jetdbt.shared.project.environments import Environment, is_template

__all__ = ["Plan", "PlanRefused", "command_args", "make_plan", "option"]


class PlanRefused(ValueError):
    """The run cannot be planned; the message names the cause and the remedy."""


def option(flag: str, *values: str) -> list[str]:
    """`flag` and its values for dbt's command line: the one place a value from a
    command, a descriptor or a run argument becomes an argument. A value that starts
    with '-' would be read by dbt as a flag of its own (`--empty`, `--target-path`)."""
    try:
        return [flag, *(check_value(f"a {flag} value", value) for value in values)]
    except ValueError as exc:
        raise PlanRefused(str(exc)) from None


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    engine: str
    warehouse: str
    target: str
    profile: str
    profiles_text: str  # holds resolved secrets: written to the job directory, never published
    env: dict[str, str]
    select: list[str]
    exclude: list[str]
    selector: str | None
    vars: dict[str, Any]
    full_refresh: bool
    threads: int | None
    test_behavior: str
    dynamic: bool
    overridden: bool
    defer: bool = False
    environment: Environment | None = None
    unlocated: str | None = None  # why `environment` (or a scratch run's `home`) is None
    # A run's scratch schema (the command's `schema`, a person's or a pull request's):
    # `environment` is where it builds; `home` is where a deferral reads the state of: the
    # environment's own location, or that of the environment it defers to.
    scratch_schema: str | None = None
    home: Environment | None = None
    lease_scope: str = ""  # what one build at a time is kept to (see _lease_scope)
    # What a sandboxed invocation may reach and write (services/runner/process/containment.py):
    # over TCP, the warehouse's real host and port (or Postgres's socket folder) and the
    # warehouse's `relay` endpoints; over HTTP(S), through the egress gate, what `egress`
    # allows; and a file warehouse's folder (DuckDB, SQLite).
    endpoints: tuple[tuple[str, int], ...] = ()
    egress: EgressPolicy | None = None
    warehouse_folder: str | None = None
    configured_folder: str | None = None  # the folder the operator's warehouse names, if any
    packages_path: str = "dbt_packages"  # dbt_project.yml's packages-install-path, rendered
    adapter: str = ""  # the target's type: the dbt adapter that runs it
    place: Place | None = None  # the server its connection lands on (setup/own_database.py)

    def publishes_ownership(self) -> bool:
        """A run whose graph is what the project owns: no override, nothing dynamic."""
        return not (self.overridden or self.dynamic)

    def selection_args(self) -> list[str]:
        args = []
        if self.select:
            args += option("--select", *self.select)
        if self.exclude:
            args += option("--exclude", *self.exclude)
        if self.selector:
            args += option("--selector", self.selector)
        return args

    def common_args(self) -> list[str]:
        """Flags every invocation of this plan takes (target, vars, threads)."""
        args = option("--target", self.target)
        if self.vars:
            args += option("--vars", msgspec.json.encode(self.vars).decode())
        if self.threads:
            args += option("--threads", str(self.threads))
        return args

    def defers_to(self) -> Environment | None:
        """The environment whose published state a deferral reads: the profile's own (also
        for a run that builds into a scratch schema), or the one its environment defers to."""
        return self.home

    def has_selection(self) -> bool:
        return bool(self.select or self.exclude or self.selector)

    def compares_state(self) -> bool:
        """Whether the selection compares against a state directory (state:, result:)."""
        return compares_state(self.select + self.exclude)


def _project_setting(doc: dict, key: str, env: dict[str, str]) -> str | None:
    """A dbt_project.yml setting rendered against the run's environment first, since dbt
    allows env_var() there and acts on the rendered value."""
    raw = doc.get(key)
    if raw is None or not isinstance(raw, str) or "{" not in raw:
        return raw

    def env_var(name: str, default: str | None = None) -> str:
        if name in env:
            return env[name]
        if default is None:
            raise PlanRefused(f"dbt_project.yml {key} uses env_var('{name}'), which is not set")
        return default

    sandbox = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined)
    return sandbox.from_string(raw).render(env_var=env_var).strip()


def _render_profile_name(doc: dict, env: dict[str, str]) -> str:
    raw = _project_setting(doc, "profile", env) or doc.get("name")
    if not isinstance(raw, str) or not raw:
        raise PlanRefused("dbt_project.yml names no profile")
    return raw


def _packages_path(doc: dict, env: dict[str, str]) -> str:
    """Where dbt deps installs packages: a folder inside the project, whatever it is called."""
    raw = _project_setting(doc, "packages-install-path", env) or "dbt_packages"
    try:
        return bundle.check_path(str(raw)).rstrip("/")
    except bundle.BundleRefused:
        raise PlanRefused(
            f"dbt_project.yml packages-install-path {raw!r} must be a folder inside the project"
        ) from None


def _own_profiles(
    project_dir: Path, path: str, profile: str, target: str | None, schema: str | None = None
) -> tuple[str, str, dict[str, Any]]:
    """The project's own profiles.yml, its chosen target and that target's output; with a
    scratch `schema`, the text with that output's schema replaced."""
    rel = bundle.check_path(path)
    file = project_dir / rel
    if not file.is_file():
        raise PlanRefused(f"profile.profiles_yml names {path!r}, which is not in the project")
    text = file.read_text()
    entry = (yaml.safe_load(text) or {}).get(profile)
    if not isinstance(entry, dict):
        raise PlanRefused(f"{path} has no profile {profile!r} (dbt_project.yml asks for it)")
    chosen = target or entry.get("target")
    if not chosen or chosen not in (entry.get("outputs") or {}):
        outputs = ", ".join(entry.get("outputs") or {}) or "none"
        raise PlanRefused(
            f"{path}: profile {profile!r} has no target {chosen!r}; outputs: {outputs}"
        )
    output = entry["outputs"][chosen]
    if not isinstance(output, dict):
        raise PlanRefused(f"{path}: {profile}.outputs.{chosen} is not a mapping")
    where = output.get("path")
    if output.get("type") == "duckdb" and isinstance(where, str) and _relative_file(where):
        raise PlanRefused(
            f"{path}: {profile}.outputs.{chosen}.path is {where!r}, a relative path: it would"
            " land in the run's own job folder, removed after the run. Give an absolute path"
        )
    if schema is None:
        return text, str(chosen), output
    doc = yaml.safe_load(text)
    output = {**output, "schema": schema}
    doc[profile]["outputs"][chosen] = output
    return yaml.safe_dump(doc, sort_keys=False), str(chosen), output


def _relative_file(path: str) -> bool:
    """A path dbt would resolve against its working folder (not :memory:, not a template,
    not a URL such as md: or s3://)."""
    return not (path.startswith("/") or path == ":memory:" or "{" in path or ":" in path)


def _selection(desc: Descriptor, cmd: DbtCommand | None):
    """A run that spells out a selection DIFFERENT from the descriptor's replaces it and
    drops the descriptor's selector; an empty or equal one keeps the descriptor's."""
    if cmd is None or not (cmd.select or cmd.exclude):
        return desc.select, desc.exclude, desc.selector, False
    if (cmd.select, cmd.exclude) == (desc.select, desc.exclude):
        return desc.select, desc.exclude, desc.selector, False
    return cmd.select, cmd.exclude, None, True


def _vars(desc: Descriptor, args: dict[str, Any] | None) -> dict[str, Any]:
    """The descriptor's vars for a run (placeholders filled) or a deploy (args is None:
    placeholder leaves left out, so dbt's var() defaults apply)."""
    if args is None:
        return without_placeholders(desc.vars)
    missing = sorted(placeholders(desc.vars) - set(args))
    if missing:
        raise PlanRefused(
            "vars placeholders without a run argument: "
            + ", ".join(f"{{{{ {m} }}}}" for m in missing)
            + "; pass them as run arguments (jetdbt run PROJECT --arg NAME=VALUE)"
        )
    return interpolate(desc.vars, args)


def _environment(
    warehouse: str, target: str, output: dict[str, Any]
) -> tuple[Environment | None, str | None]:
    """Where this target's relations live, or why that cannot be known before dbt runs."""
    kind = output.get("type")
    if kind == "duckdb":
        schema = output.get("schema") or "main"
        database = output.get("database") or Path(str(output.get("path", ""))).stem
    else:
        schema = output.get("schema") or ("public" if kind == "postgres" else "")
        database = next(
            (str(output[k]) for k in ("database", "dbname", "catalog", "project") if output.get(k)),
            "",
        )
    for name, value in (("schema", schema), ("database", database)):
        if is_template(str(value)):
            return None, (
                f"the profile's {name} is a template ({value!r}), rendered by dbt and"
                " not here, so its relations have no known location"
            )
    return Environment(
        warehouse=warehouse, target=target, schema=str(schema), database=str(database)
    ), None


def _check_state_methods(desc: Descriptor, cmd: DbtCommand | None, defer: bool) -> None:
    """Selectors that read a state are refused where they could only answer silently wrong."""
    spelled = selection_methods(desc.select + desc.exclude)
    if spelled & STATE_READERS:
        raise PlanRefused(
            "the descriptor's select/exclude use a state:/result:/source_status: method; they"
            " decide what the project owns and are resolved at deploy, with no state to compare"
            " against. Put such selectors in a run's own --select instead"
        )
    run = selection_methods((cmd.select + cmd.exclude) if cmd else [])
    if "source_status" in run:
        raise PlanRefused(
            "source_status: compares sources.json, which `dbt source freshness` writes and no"
            " run publishes here, so there is nothing to compare against; select otherwise"
        )
    if run & STATE_METHODS and not defer:
        raise PlanRefused(
            "state:/result: selectors compare against the environment's published state, which"
            " only a deferring run is handed: add --defer (or defer: true on the command)"
        )


def _lease_scope(
    warehouse: str, target: str, output: dict[str, Any], environment: Environment | None
) -> str:
    """The environment one build at a time is kept to: a DuckDB file is one environment for
    every project that writes it; otherwise the environment key state and deferral use, or
    the warehouse and target when the schema is only known once dbt runs."""
    if output.get("type") == "duckdb" and output.get("path"):
        return f"duckdb file {Path(str(output['path'])).resolve()}"
    if environment is not None:
        return environment.key()
    return f"warehouse {warehouse!r}, target {target!r}"


def _endpoints(output: dict[str, Any], wh: Warehouse) -> tuple[tuple[str, int], ...]:
    """The host and port a networked warehouse's connection goes to (a host that is a path
    is the folder of Postgres's socket), then the warehouse's `relay` endpoints."""
    host, port = profile_endpoint(output)
    named = [(host, port)] if host and port else []
    where = f"warehouse {wh.name!r} relay"
    return tuple(dict.fromkeys([*named, *(parse_endpoint(e, where) for e in wh.relay)]))


def _warehouse_folder(output: dict[str, Any]) -> str | None:
    """A file warehouse's folder, which its invocations write: a DuckDB file's (its file and
    WAL), a SQLite target's schema_directory (where its attached schema files lie)."""
    kind = output.get("type")
    place = output.get("path") if kind == "duckdb" else output.get("schema_directory")
    if kind not in ("duckdb", "sqlite") or not isinstance(place, str) or not place.startswith("/"):
        return None
    return str(Path(place).resolve().parent if kind == "duckdb" else Path(place).resolve())


def _own_file_folder(
    path: str, folder: str | None, configured: str | None, warehouse: str, job: Path
) -> str | None:
    """The folder a project's own profile's file warehouse makes writable: one in the folder
    of the warehouse it names, or none in its job's folder (already writable). Anywhere else
    is refused: the folder would become writable by, and owned by, the sandbox's user (a
    DuckDB file in /etc would hand it /etc)."""
    if folder is None:
        return None
    where = Path(folder)
    if configured and (where == Path(configured) or Path(configured) in where.parents):
        where.mkdir(parents=True, exist_ok=True)  # as the warehouse's own profile makes it
        return folder
    if job.resolve() in where.parents:
        return None
    raise PlanRefused(
        f"{path}: the target's file lies in {folder}, outside warehouse {warehouse!r}'s folder"
        f" ({configured or 'none: it is not a file warehouse'}) and the job's folder;"
        " a project's own profile may write a warehouse file only there"
    )


def _output(
    desc: Descriptor,
    wh: Warehouse,
    resolver: Resolver,
    project_dir: Path,
    profile: str,
    project: str,
) -> tuple[str, dict[str, Any]]:
    """The target an environment's descriptor chooses and its output, before any scratch
    schema: its own profiles.yml's, or the configured warehouse's (in the project's own
    schema on a warehouse that gives each project one)."""
    if desc.profile.profiles_yml:
        _, target, output = _own_profiles(
            project_dir, desc.profile.profiles_yml, profile, desc.profile.target
        )
        return target, output
    target = desc.profile.target or wh.target
    schema = schema_of(wh, project, desc.profile.schema)
    return target, render_output(wh, resolver, schema=schema, threads=desc.threads)


def _scratch(
    cmd: DbtCommand | None,
    scratch_for: Callable[[str], str] | None,
    warehouse: str,
    target: str,
    base: dict[str, Any],
) -> str | None:
    """The schema a run builds into instead of its environment's: the command's own, else
    the one its placement names after the environment's schema (a person's, a PR's)."""
    if cmd is not None and cmd.schema:
        return cmd.schema
    if scratch_for is None:
        return None
    located, unlocated = _environment(warehouse, target, base)
    if located is None:
        raise PlanRefused(
            f"the run builds into a schema of its own, named after its own: {unlocated}"
        )
    return scratch_for(located.schema)


def make_plan(
    desc: Descriptor,
    cmd: DbtCommand | None,
    args: dict[str, Any] | None,
    wh: Warehouse,
    resolver: Resolver,
    project_dir: Path,
    engine: str,
    *,
    project: str,
    home_desc: Descriptor | None = None,
    scratch_for: Callable[[str], str] | None = None,
) -> Plan:
    """`args` is None for a deploy, the run arguments for a run. `desc` is the run's
    environment's (setup/placement.py); `home_desc` the environment its deferral reads when
    another; `scratch_for` names a schema of the run's own after its environment's.
    `project` is the project's name, its schema on a warehouse that gives each project one."""
    defer = bool(desc.defer if cmd is None or cmd.defer is None else cmd.defer) and cmd is not None
    defer = defer and "defer" in TAKES[cmd.label]  # a seed or a freshness check defers to nothing
    _check_state_methods(desc, cmd, defer)
    env = {k: resolver.resolve(v, f"env.{k}", from_project=True) for k, v in desc.env.items()}
    dbt_vars = _vars(desc, args)
    if cmd is not None and cmd.vars:
        dbt_vars = {**dbt_vars, **cmd.vars}
    select, exclude, selector, narrowed = _selection(desc, cmd)
    full_refresh = bool(desc.full_refresh or (cmd is not None and cmd.full_refresh))
    # The environment dbt itself gets, never the runner's: a profile name rendered with
    # env_var() must not be a way to read (and echo in a refusal) the runner's secrets.
    seen = dbt_env(env)
    project_doc = yaml.safe_load((project_dir / "dbt_project.yml").read_text()) or {}
    profile = _render_profile_name(project_doc, seen)
    target, base = _output(desc, wh, resolver, project_dir, profile, project)
    scratch = _scratch(cmd, scratch_for, wh.name, target, base)
    if desc.profile.profiles_yml:
        text, target, output = _own_profiles(
            project_dir, desc.profile.profiles_yml, profile, desc.profile.target, scratch
        )
    else:
        output = {**base, "schema": scratch} if scratch else base
        text = render_profiles(profile, target, output)
    home_target, home_output = (
        (target, base)
        if home_desc is None
        else _output(home_desc, wh, resolver, project_dir, profile, project)
    )
    environment, unlocated = _environment(wh.name, target, output)
    home, home_unlocated = _environment(wh.name, home_target, home_output)
    unlocated = unlocated or home_unlocated
    lease_scope = _lease_scope(wh.name, target, output, environment)
    if not desc.profile.profiles_yml and wh.credentials == run_credentials.PER_RUN:
        text = render_profiles(profile, target, run_credentials.login_left_out(output, lease_scope))
    overridden = narrowed or bool(cmd and (cmd.vars or cmd.full_refresh or scratch))
    warehouse_folder = _warehouse_folder(output)
    configured_folder = _warehouse_folder(
        wh.output if wh.type == "dbt_profile" else {"type": wh.type, "path": wh.path}
    )
    if desc.profile.profiles_yml:
        warehouse_folder = _own_file_folder(
            desc.profile.profiles_yml, warehouse_folder, configured_folder, wh.name,
            project_dir.parent,
        )  # fmt: skip
    # What a run reaches is the operator's warehouse's, never what a project's profile says.
    operators = render_output(wh, resolver) if desc.profile.profiles_yml else base
    try:
        place = place_of_output(output)
    except OwnDatabase as exc:
        raise PlanRefused(f"the profile's target {target!r}: {exc}") from None
    plan = Plan(
        engine=engine,
        warehouse=wh.name,
        target=target,
        profile=profile,
        profiles_text=text,
        env=env,
        select=list(select),
        exclude=list(exclude),
        selector=selector,
        vars=dbt_vars,
        full_refresh=full_refresh,
        threads=desc.threads,
        test_behavior=getattr(cmd, "test_behavior", None) or desc.test_behavior,
        dynamic=is_dynamic(desc),
        overridden=overridden,
        defer=defer,
        environment=environment,
        unlocated=unlocated,
        scratch_schema=scratch,
        home=home,
        lease_scope=lease_scope,
        endpoints=_endpoints(output, wh),
        egress=policy_for(wh.name, wh.adapter(), operators, wh.allow_hosts),
        warehouse_folder=warehouse_folder,
        configured_folder=configured_folder,
        packages_path=_packages_path(project_doc, seen),
        adapter=str(output.get("type") or ""),
        place=place,
    )
    plan.selection_args()  # refuses a value that would reach dbt as a flag, before it runs
    plan.common_args()
    return plan


_NOT_SHOWN = ("resource_type:test", "resource_type:unit_test")


def command_args(plan: Plan, cmd: DbtCommand, defer: list[str]) -> list[str]:
    """The arguments of a dbt command other than a build's sequence, after the plan's
    common ones: its selection, and the overrides its dbt takes
    (jetdbt.shared.project.arguments.TAKES).
    `defer` is the deferral's flags when the run defers."""
    if isinstance(cmd, ClosePrCommand):
        return [close_pr.MACRO]  # the runner's own macro, which takes no argument
    if isinstance(cmd, OperationCommand):
        # The macro is dbt's positional argument: check_macro let only a name through.
        args = [check_value("macro", cmd.macro)]
        if cmd.macro_args:
            args += option("--args", msgspec.json.encode(cmd.macro_args).decode())
        return args
    if isinstance(cmd, ShowCommand):
        # A preview runs no test: dbt would select the node's tests with it, and one that
        # reads a relation not built yet fails the show. show takes one --exclude.
        shown = msgspec.structs.replace(plan, exclude=[*plan.exclude, *_NOT_SHOWN])
        return [
            *defer,
            *shown.selection_args(),
            *option("--limit", str(cmd.limit)),
            *("--output", "json"),
        ]
    args = [*defer, *plan.selection_args()]
    if plan.full_refresh and "full_refresh" in TAKES[cmd.label]:
        args.append("--full-refresh")
    return args
