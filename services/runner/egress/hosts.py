"""Which hosts a run's HTTP(S) may reach through the egress gate (gate.py): what its adapter
needs to reach its warehouse, and what the operator adds with `allow_hosts`.

A rule is a host name, optionally with `:port` (without one: 443 and 80, HTTPS and the
plain HTTP of OCSP and CRLs), where a label may be a glob (`*-dataproc`) and a leading
`*.` stands for one label or more (`*.s3.amazonaws.com`, a bucket's name may hold dots).
An IP address matches only itself. Nothing else is reached: not jetdbt's own servers,
not a cloud's metadata service, not another team's warehouse.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from typing import Any

import msgspec

__all__ = [
    "EgressPolicy",
    "HostRule",
    "adapter_hosts",
    "is_host",
    "normal_host",
    "parse_endpoint",
    "parse_rule",
    "policy_for",
    "split_port",
]

_LABEL = re.compile(r"[a-z0-9*]([a-z0-9*_-]*[a-z0-9*])?\Z")
_DEFAULT_PORTS = (443, 80)

# What each adapter's client reaches besides the host its profile names, by the same
# spelling its docs give. `{account}`-like names are filled from the rendered profile.
_STORAGE = ("*.s3.amazonaws.com", "*.s3.*.amazonaws.com", "*.blob.core.windows.net",
            "*.dfs.core.windows.net", "storage.googleapis.com")  # fmt: skip
_AWS_AUTH = ("sts.amazonaws.com", "sts.*.amazonaws.com")
_DEFAULTS: dict[str, tuple[str, ...]] = {
    # The account's host, Snowflake's OCSP cache and the CAs' responders its certificates
    # name, and the stage's object store (on whichever cloud the account lives).
    "snowflake": (
        "{account}.snowflakecomputing.com",
        "*.{account}.snowflakecomputing.com",
        "ocsp.snowflakecomputing.com",
        "ocsp.*.snowflakecomputing.com",
        "ocsp.digicert.com",
        "ocsp.pki.goog",
        "o.ss2.us",
        "*.amazontrust.com",
        *_STORAGE,
    ),
    # Google's OAuth and the APIs dbt-bigquery calls (jobs, storage read, Dataproc for
    # Python models, impersonation); never the metadata server.
    "bigquery": (
        "oauth2.googleapis.com",
        "accounts.google.com",
        "www.googleapis.com",
        "bigquery.googleapis.com",
        "bigquerystorage.googleapis.com",
        "storage.googleapis.com",
        "iamcredentials.googleapis.com",
        "sts.googleapis.com",
        "dataproc.googleapis.com",
        "*-dataproc.googleapis.com",
    ),
    # The workspace (its profile's host) and the cloud storage results are fetched from.
    "databricks": ("login.microsoftonline.com", *_STORAGE),
    # IAM logins: the cluster's or the workgroup's credentials, through STS.
    "redshift": ("redshift.*.amazonaws.com", "redshift-serverless.*.amazonaws.com", *_AWS_AUTH),
    "athena": (
        "athena.*.amazonaws.com",
        "glue.*.amazonaws.com",
        "s3.*.amazonaws.com",
        *_STORAGE,
        *_AWS_AUTH,
    ),
    "fabric": ("login.microsoftonline.com",),
    "synapse": ("login.microsoftonline.com",),
    "sqlserver": ("login.microsoftonline.com",),
}


class HostRule(msgspec.Struct, frozen=True):
    """One allowed host (pattern) and port (None: 443 and 80); `source` names the setting
    it came from, for the refusal's remedy."""

    pattern: str
    port: int | None
    source: str

    def matches(self, host: str, port: int) -> bool:
        if port not in ((self.port,) if self.port else _DEFAULT_PORTS):
            return False
        if _is_address(self.pattern) or _is_address(host):
            return _is_address(host) and ipaddress.ip_address(host) == _address(self.pattern)
        wanted, labels = self.pattern.split("."), host.split(".")
        if wanted[0] == "*" and len(wanted) > 1:  # `*.rest`: one label or more, then rest
            rest = wanted[1:]
            return len(labels) > len(rest) and _labels_match(rest, labels[-len(rest) :])
        return len(wanted) == len(labels) and _labels_match(wanted, labels)


class EgressPolicy(msgspec.Struct, frozen=True):
    """What one invocation's gate lets through."""

    warehouse: str
    adapter: str
    rules: tuple[HostRule, ...] = ()

    def allows(self, host: str, port: int) -> bool:
        host = normal_host(host)
        return any(rule.matches(host, port) for rule in self.rules)

    def refusal(self, host: str, port: int) -> str:
        """Why `host`:`port` was refused and which setting would allow it."""
        return (
            f"egress to {normal_host(host)}:{port} refused: it is not a host warehouse"
            f" {self.warehouse!r} ({self.adapter or 'no adapter'}) needs; an operator allows"
            f' it with `allow_hosts: ["{normal_host(host)}:{port}"]` on that warehouse'
            " (JETDBT_WAREHOUSES)"
        )


def normal_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def is_host(host: str) -> bool:
    """Whether a request's `host` (normal) is an IP address or a name without globs."""
    return _is_address(host) or ("*" not in host and _is_name(host.split(".")))


def _is_name(labels: list[str]) -> bool:
    """Labels of a name: a resolver reads one whose last label is a number (`127.1`) as an
    address, so that is no name."""
    fits = len(".".join(labels)) <= 253 and all(len(label) <= 63 for label in labels)
    return fits and all(map(_LABEL.match, labels)) and not labels[-1].isdigit()


def _labels_match(patterns: list[str], labels: list[str]) -> bool:
    return all(fnmatch.fnmatchcase(label, p) for p, label in zip(patterns, labels, strict=True))


def _is_address(text: str) -> bool:
    return _address(text) is not None


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_rule(text: str, source: str) -> HostRule:
    """`host`, `host:port`, `*.domain`, `[v6]:port`; a ValueError names what is wrong."""
    raw = str(text).strip()
    host, port = split_port(raw, source)
    if _is_address(host):
        return HostRule(host, port, source)
    labels = host.split(".")
    if len(labels) < 2 or not _is_name(labels):
        raise ValueError(
            f"{source}: {raw!r} is not a host name (labels of a-z, 0-9, '-', a '*' glob;"
            " at least two labels)"
        )
    if any("*" in label for label in labels[-2:]):
        raise ValueError(f"{source}: {raw!r} would allow a whole domain: name it (two labels)")
    return HostRule(host, port, source)


def split_port(text: str, source: str) -> tuple[str, int | None]:
    """`host`, `host:port` or `[v6]:port` as its normal host and port (None if not named);
    a ValueError names what is wrong."""
    raw = str(text).strip()
    host, port = raw, None
    if raw.startswith("["):
        host, _, rest = raw[1:].partition("]")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{source}: {raw!r} has text after ']' that is no ':port'")
        port = rest[1:] if rest else None
    elif raw.count(":") == 1:
        host, port = raw.split(":")
    if port is not None and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"{source}: {raw!r} has no valid port (1 to 65535)")
    return normal_host(host), None if port is None else int(port)


def parse_endpoint(text: str, source: str) -> tuple[str, int]:
    """A relay's `host:port` (a port is required: the relay speaks TCP, not HTTP)."""
    rule = parse_rule(text, source)
    if rule.port is None or "*" in rule.pattern:
        raise ValueError(f"{source}: {text!r} must be one host and its port, as host:port")
    return rule.pattern, rule.port


def profile_endpoint(output: dict[str, Any]) -> tuple[str | None, int | None]:
    """The host (or Postgres's socket folder) and port a profile's connection names: `host`,
    or `server` as dbt-sqlserver, dbt-fabric and dbt-mysql spell it."""
    host = next((output[k] for k in ("host", "server") if isinstance(output.get(k), str)), None)
    port = output.get("port")
    valid = isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536
    return (host or None), (port if valid else None)


def adapter_hosts(adapter: str, output: dict[str, Any]) -> list[str]:
    """The hosts `adapter` reaches for the profile `output`: the host it names (with its
    port, if any) and the adapter's defaults, filled from the profile."""
    hosts = []
    named, port = profile_endpoint(output)
    # A profile names hosts, never patterns: a `*` there would widen what a run reaches.
    if named and not named.startswith("/") and "*" not in named:
        hosts.append(f"{named}:{port}" if port else named)
    account = str(output.get("account") or "")
    account = "" if "*" in account else account
    for pattern in _DEFAULTS.get(adapter, ()):
        if "{account}" in pattern:
            if not account:
                continue
            # Snowflake's host spells an account's underscores as hyphens; both answer.
            for spelling in dict.fromkeys((account, account.replace("_", "-"))):
                hosts.append(pattern.format(account=spelling.lower()))
            continue
        hosts.append(pattern)
    return hosts


def policy_for(
    warehouse: str, adapter: str, output: dict[str, Any], allow_hosts: tuple[str, ...] = ()
) -> EgressPolicy:
    """The policy of a run of `warehouse`: its adapter's hosts, then the operator's."""
    defaults = f"the {adapter} adapter's own hosts"
    rules: list[HostRule] = []
    for host in adapter_hosts(adapter, output):
        try:
            rules.append(parse_rule(host, defaults))
        except ValueError:
            continue  # a profile's host that is no name (a template) reaches nothing
    rules += [parse_rule(h, f"warehouse {warehouse!r} allow_hosts") for h in allow_hosts]
    return EgressPolicy(warehouse=warehouse, adapter=adapter, rules=tuple(rules))
