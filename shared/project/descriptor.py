"""The optional project descriptor `jetdbt.yaml`, decoded strictly.

Absent means empty, never an error. Anything present is checked: an unknown
key, a wrong type or an impossible value is an error that names the key and
says what is allowed, because a typo silently ignored builds the wrong thing.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

import msgspec
import yaml
from jetdbt.shared.bus import subjects
from jetdbt.shared.project.engines import ENGINES

__all__ = [
    "Descriptor",
    "DescriptorError",
    "Profile",
    "RetryPolicy",
    "EnvironmentSpec",
    "DEFAULT_ENVIRONMENT",
    "PERSONAL_ENVIRONMENT",
    "FILENAME",
    "RESERVED_ARG_NAMES",
    "load",
    "parse",
    "environment_name",
    "environment_names",
    "environment_spec",
    "personal_environments",
    "unknown_environment",
    "in_environment",
    "placeholders",
    "interpolate",
    "is_dynamic",
    "without_placeholders",
    "reference",
]

FILENAME = "jetdbt.yaml"

# Names a command block already uses: a `{{ placeholder }}` may not shadow them.
RESERVED_ARG_NAMES = frozenset(
    {
        "command",
        "label",
        "select",
        "exclude",
        "selector",
        "vars",
        "full_refresh",
        "defer",
        "dbt_retry_job",
        "model",
        "limit",
        "run_id",
        "requested_by",
        "hidden",
        "args",
    }
)

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_REFERENCE = re.compile(r"\$(env|var):(.+)\Z")
# Environment names a project may not set: they decide what runs and where. (dbt's own
# flag variables, DBT_EMPTY and the like, are dropped where dbt starts: forkserver.py.)
_RUNNER_OWNED = re.compile(r"(LD_|PYTHON)|(PATH|HOME|TMPDIR)\Z")
# Names that steer the tools dbt starts (git, the package hub's HTTP client, pip, uv) rather
# than the project: with them `dbt deps` would run a project's command (GIT_SSH_COMMAND,
# GIT_CONFIG_*), fetch from its own hub or proxy, or trust its own CA.
_TOOL_OWNED = re.compile(
    r"(GIT_|SSH_|CURL_|PIP_|UV_|SSL_CERT_)|(DBT_PACKAGE_HUB_URL|REQUESTS_CA_BUNDLE)\Z"
    r"|.*_PROXY\Z",
    re.IGNORECASE,
)

Engine = Literal[ENGINES]
TestBehavior = Literal["build", "after_all", "none"]


class Profile(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    # The configured warehouse its relations are keyed by: `main` unless named, except
    # with an own profiles.yml, which has no default identity and must name one.
    warehouse: str | None = None
    target: str | None = None
    schema: str | None = None
    profiles_yml: str | None = None

    def warehouse_name(self) -> str:
        return self.warehouse or "main"


class RetryPolicy(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    attempts: Annotated[int, msgspec.Meta(ge=0, le=10)] = 1
    delay_seconds: Annotated[float, msgspec.Meta(ge=0, le=3600)] = 0


# The environment a project's top-level descriptor describes, and runs default to; and the
# one that is each person's own (a schema per principal, deferring to the default one)
# whether the descriptor declares it or not.
DEFAULT_ENVIRONMENT = "prod"
PERSONAL_ENVIRONMENT = "dev"
RunRole = Literal["runner", "deployer", "admin"]

_CHOICES = {
    "engine": ", ".join(Engine.__args__),
    "test_behavior": ", ".join(TestBehavior.__args__),
    "roles": ", ".join(RunRole.__args__),
}


class EnvironmentSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """One named environment of a project (`environments.<name>` in jetdbt.yaml): what it
    sets over the top-level descriptor (the default environment's). `profile` keys given
    replace the top-level ones, `env` values are added over the top-level ones; `roles` are
    the roles of the project's team that may run in it; `defer_to` names the environment
    whose published state its deferring runs read (None: its own; a personal one: the
    default); `personal` builds into `<schema>__<principal>`, one schema per person."""

    profile: Profile = Profile()
    threads: Annotated[int, msgspec.Meta(ge=1, le=64)] | None = None
    env: dict[str, str] = {}
    roles: list[RunRole] = msgspec.field(default_factory=lambda: ["runner", "deployer", "admin"])
    defer: bool | None = None
    defer_to: str | None = None
    personal: bool = False


class Descriptor(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    engine: Engine | None = None  # None: the runner's JETDBT_DEFAULT_ENGINE
    profile: Profile = Profile()
    select: list[str] = []
    exclude: list[str] = []
    selector: str | None = None
    test_behavior: TestBehavior = "build"
    column_lineage: bool = False
    vars: dict[str, Any] = {}
    threads: Annotated[int, msgspec.Meta(ge=1, le=64)] | None = None
    full_refresh: bool = False
    env: dict[str, str] = {}
    retry_failed_nodes: RetryPolicy | None = None
    defer: bool = False
    environments: dict[str, EnvironmentSpec] = {}


class DescriptorError(ValueError):
    """What is wrong with jetdbt.yaml, naming the key."""


# msgspec's names of types, as a descriptor's author reads them.
_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "str": "text",
    "bool": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "nothing",
}
_BOUNDS = {"<=": "at most", ">=": "at least", "<": "under", ">": "over"}


def _words(kinds: str) -> str:
    """`int | null` as "a whole number": what a key takes, without Python's type names."""
    named = [_WORDS.get(k.strip(), k.strip()) for k in kinds.split("|") if k.strip() != "null"]
    return " or ".join(named) or "nothing"


def _kind_of(value: Any) -> str:
    if isinstance(value, bool):
        return _WORDS["bool"]
    if isinstance(value, int):
        return _WORDS["int"]
    if isinstance(value, float):
        return _WORDS["float"]
    if isinstance(value, str):
        return _WORDS["str"]
    if isinstance(value, list):
        return _WORDS["array"]
    if isinstance(value, dict):
        return _WORDS["object"]
    return _WORDS["null"]


def _suggestion(word: str, allowed: list[str]) -> str:
    """ " (did you mean 'threads'?)" for a near miss (the first of equals), else nothing."""
    import difflib

    scored = [
        (difflib.SequenceMatcher(None, word, a).ratio(), -i, a) for i, a in enumerate(allowed)
    ]
    score, _, best = max(scored, default=(0.0, 0, ""))
    return f" (did you mean '{best}'?)" if score >= 0.6 else ""


def _allowed(path: str) -> list[str]:
    if path.endswith(".profile"):
        kind = Profile
    elif path.endswith(".retry_failed_nodes"):
        kind = RetryPolicy
    elif re.fullmatch(r"\$\.environments\.[^.]+", path):
        kind = EnvironmentSpec
    else:
        kind = Descriptor
    return [f.name for f in msgspec.structs.fields(kind)]


def _choices(key: str) -> str:
    """The values a fixed-choice key takes, also inside an environment or a list."""
    return _CHOICES.get(re.sub(r"^environments\.[^.]+\.|\[\d+\]$", "", key), "")


def _value_at(raw: Any, key: str) -> Any:
    """The value a descriptor gave at `key` (`profile.target`, `select[0]`)."""
    for part in re.findall(r"[^.\[\]]+", key):
        if isinstance(raw, dict):
            raw = raw.get(part)
        elif isinstance(raw, list) and part.isdigit() and int(part) < len(raw):
            raw = raw[int(part)]
        else:
            return None
    return raw


def _explain(exc: msgspec.ValidationError, raw: Any, at: str = "$") -> str:
    """msgspec's error in the descriptor's words; `at` is where the value it checked sits
    (an environment's spec is checked on its own: msgspec names no mapping key)."""
    text = re.sub(r"`\$", f"`{at}", str(exc))
    if " - at `" not in text and at != "$":
        text += f" - at `{at}`"
    match = re.match(r"Object contains unknown field `([^`]+)`(?: - at `([^`]+)`)?", text)
    if match:
        key, at = match.groups()
        at = at or "$"
        where = at.removeprefix("$").lstrip(".") or "the top level"
        allowed = _allowed(at)
        return (
            f"unknown key '{key}' in {where}{_suggestion(key, allowed)};"
            f" allowed: {', '.join(allowed)}"
        )
    match = re.match(r"(.*) - at `\$\.([^`]+)`", text)
    if not match:
        return text
    what, key = match.groups()
    value = _value_at(raw, key)
    shown = repr(value) if isinstance(value, str) else str(value)
    if found := re.fullmatch(r"Invalid enum value '(.*)'", what):
        choices = _choices(key)
        return (
            f"key '{key}': {found.group(1)!r} is not allowed"
            f"{_suggestion(found.group(1), choices.split(', '))}; allowed: {choices}"
        )
    if found := re.fullmatch(r"Expected `([^`]+)`, got `[^`]+`", what):
        return f"key '{key}' takes {_words(found.group(1))}, got {_kind_of(value)}: {shown}"
    if found := re.fullmatch(r"Expected `[^`]+` (<=|>=|<|>) (\S+)", what):
        return f"key '{key}' must be {_BOUNDS[found.group(1)]} {found.group(2)}, got {shown}"
    return f"key '{key}': {what}"


def parse(text: str) -> Descriptor:
    """Decode descriptor YAML text; an empty document is the empty descriptor."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DescriptorError(f"{FILENAME} is not valid YAML: {exc}") from None
    if raw is None:
        return Descriptor()
    if not isinstance(raw, dict):
        raise DescriptorError(f"{FILENAME} must be a mapping of keys, got {_kind_of(raw)}")
    _check_env_text(raw.get("env"), "env")
    environments = raw.get("environments")
    if isinstance(environments, dict):
        for name, spec in environments.items():
            if isinstance(spec, dict):
                _check_env_text(spec.get("env"), f"environments.{name}.env")
    environments = raw.get("environments")
    for name, spec in environments.items() if isinstance(environments, dict) else ():
        if not isinstance(name, str):
            raise DescriptorError(f"{FILENAME}: key 'environments' has {name!r}; name it by text")
        try:
            msgspec.convert(spec, EnvironmentSpec)
        except msgspec.ValidationError as exc:
            at = f"$.environments.{name}"
            raise DescriptorError(f"{FILENAME}: {_explain(exc, raw, at)}") from None
    try:
        desc = msgspec.convert(raw, Descriptor)
    except msgspec.ValidationError as exc:
        raise DescriptorError(f"{FILENAME}: {_explain(exc, raw)}") from None
    _check(desc)
    return desc


def _check_env_text(env: Any, where: str) -> None:
    """Env values are text: YAML would read `3` or `true` as another kind."""
    if not isinstance(env, dict):
        return
    for key, value in env.items():
        if not isinstance(value, str):
            raise DescriptorError(
                f"{FILENAME}: key '{where}.{key}' takes text, got {_kind_of(value)}: {value}"
                " (quote it, or use $env:NAME / $var:PATH)"
            )


def _check(desc: Descriptor) -> None:
    for name in placeholders(desc.vars):
        if name in RESERVED_ARG_NAMES:
            raise DescriptorError(
                f"{FILENAME}: key 'vars' uses placeholder '{{{{ {name} }}}}', a reserved argument"
                f" name; reserved: {', '.join(sorted(RESERVED_ARG_NAMES))}"
            )
    _check_env(desc.env, "env")
    _check_profile(desc.profile, "profile")
    if desc.selector is not None and not desc.selector.strip():
        raise DescriptorError(f"{FILENAME}: key 'selector' is empty; name a selectors.yml entry")
    _check_environments(desc)


def _check_env(env: dict[str, str], where: str) -> None:
    """Env values a project sets (top level or an environment's), one rule for both."""
    for key, value in env.items():
        if _RUNNER_OWNED.match(key):
            raise DescriptorError(
                f"{FILENAME}: key '{where}.{key}' is refused: PATH, HOME, TMPDIR, LD_* and"
                " PYTHON* decide what runs and where, and are the runner's"
            )
        if _TOOL_OWNED.match(key):
            raise DescriptorError(
                f"{FILENAME}: key '{where}.{key}' is refused: GIT_*, SSH_*, *_PROXY, CURL_*,"
                " PIP_*, UV_*, SSL_CERT_*, REQUESTS_CA_BUNDLE and DBT_PACKAGE_HUB_URL steer the"
                " tools dbt starts (git, the package hub, installers), not the project"
            )
        if value.startswith("$") and not _REFERENCE.match(value):
            raise DescriptorError(
                f"{FILENAME}: key '{where}.{key}' is {value!r}; a reference is $env:NAME or"
                " $var:PATH (a literal starting with '$' is not allowed)"
            )


def _check_profile(profile: Profile, where: str) -> None:
    if profile.profiles_yml and profile.warehouse is None:
        raise DescriptorError(
            f"{FILENAME}: key '{where}.warehouse' is required with {where}.profiles_yml: an own"
            " profiles.yml has no default identity, so name the configured warehouse its"
            " relations are keyed by"
        )


def _check_environments(desc: Descriptor) -> None:
    """Each declared environment: a plain name, its env and profile under the top level's
    rules, and a `defer_to` naming an environment the project has."""
    known = environment_names(desc)
    for name, spec in desc.environments.items():
        try:
            subjects.check_environment_name(name)
        except subjects.InvalidName as exc:
            raise DescriptorError(f"{FILENAME}: key 'environments.{name}': {exc}") from None
        _check_env(spec.env, f"environments.{name}.env")
        _check_profile(spec.profile, f"environments.{name}.profile")
        if spec.defer_to is not None and spec.defer_to not in known:
            raise DescriptorError(
                f"{FILENAME}: key 'environments.{name}.defer_to' is {spec.defer_to!r}, which is"
                f" not an environment of the project; its environments: {', '.join(known)}"
            )


def environment_name(name: str) -> str:
    """An environment's name as recorded: "" (a command or an event from before environments,
    or one that names none) is the default environment."""
    return name or DEFAULT_ENVIRONMENT


def environment_names(desc: Descriptor) -> list[str]:
    """Every environment a project has: the default, the personal one, and those declared."""
    return sorted({DEFAULT_ENVIRONMENT, PERSONAL_ENVIRONMENT, *desc.environments})


def environment_spec(desc: Descriptor, name: str) -> EnvironmentSpec:
    """The environment `name` ("": the default) as declared, or as built in: the default
    environment is the top-level descriptor, the personal one each person's schema of it.
    An unknown name is an error naming those the project has."""
    name = environment_name(name)
    spec = desc.environments.get(name)
    if spec is not None:
        return spec
    if name == DEFAULT_ENVIRONMENT:
        return EnvironmentSpec()
    if name == PERSONAL_ENVIRONMENT:
        return EnvironmentSpec(personal=True)
    raise unknown_environment(name, environment_names(desc))


def personal_environments(desc: Descriptor) -> list[str]:
    """The environments of `desc` that build one schema per person."""
    return [n for n in environment_names(desc) if environment_spec(desc, n).personal]


def unknown_environment(name: str, known: list[str]) -> DescriptorError:
    """The error for an environment a project does not have, naming those it has."""
    return DescriptorError(
        f"the project has no environment {name!r}; its environments: {', '.join(known)}"
        f" (declare others under `environments:` in {FILENAME})"
    )


def in_environment(desc: Descriptor, name: str) -> Descriptor:
    """The descriptor a run in environment `name` plans with: the top-level one with the
    environment's profile keys, threads and env values over it (its `environments` left out,
    so a plan never reads another environment's)."""
    spec = environment_spec(desc, name)
    given = {k: v for k, v in msgspec.structs.asdict(spec.profile).items() if v is not None}
    profile = msgspec.structs.replace(desc.profile, **given)
    return msgspec.structs.replace(
        desc,
        profile=profile,
        threads=spec.threads or desc.threads,
        env={**desc.env, **spec.env},
        defer=desc.defer if spec.defer is None else spec.defer,
        environments={},
    )


def load(project_dir) -> Descriptor:
    """The descriptor inside a project directory, or the empty one when there is none."""
    path = project_dir / FILENAME
    if not path.exists():
        return Descriptor()
    return parse(path.read_text())


def placeholders(value: Any) -> set[str]:
    """Every `{{ name }}` in the string leaves of a vars tree."""
    found: set[str] = set()
    if isinstance(value, str):
        found.update(_PLACEHOLDER.findall(value))
    elif isinstance(value, dict):
        for item in value.values():
            found |= placeholders(item)
    elif isinstance(value, list):
        for item in value:
            found |= placeholders(item)
    return found


def interpolate(value: Any, args: dict[str, Any]) -> Any:
    """Fill placeholders from run arguments; a leaf that is one whole placeholder keeps the
    argument's type, so numbers and lists stay typed."""
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value.strip())
        if whole:
            return args[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(args[m.group(1)]), value)
    if isinstance(value, dict):
        return {k: interpolate(v, args) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, args) for v in value]
    return value


def without_placeholders(value: Any) -> Any:
    """The vars tree minus every leaf that needs a run argument: what a deploy-time parse
    can use, leaving dbt's own var() defaults for the rest."""
    if isinstance(value, dict):
        return {k: without_placeholders(v) for k, v in value.items() if not _needs_arg(v)}
    if isinstance(value, list):
        return [without_placeholders(v) for v in value if not _needs_arg(v)]
    return value


def _needs_arg(value: Any) -> bool:
    return isinstance(value, str) and bool(_PLACEHOLDER.search(value))


def is_dynamic(desc: Descriptor) -> bool:
    """A descriptor whose vars or env change per run, so its graph belongs to each run."""
    return bool(placeholders(desc.vars)) or any(v.startswith("$var:") for v in desc.env.values())


def reference(value: str) -> tuple[str, str] | None:
    """('env', NAME) or ('var', PATH) for a reference, None for a literal."""
    match = _REFERENCE.match(value)
    return (match.group(1), match.group(2)) if match else None
