"""Which hosts a run's HTTP(S) may reach (services/runner/egress/hosts.py): each adapter's own
hosts filled from its profile, the operator's `allow_hosts`, and nothing else."""

from __future__ import annotations

import pytest
from jetdbt.services.runner.egress.hosts import is_host, parse_endpoint, parse_rule, policy_for

SNOWFLAKE = policy_for("sf", "snowflake", {"type": "snowflake", "account": "MyOrg-My_Acct"})
BIGQUERY = policy_for("bq", "bigquery", {"type": "bigquery", "project": "p"})
DATABRICKS = policy_for(
    "db", "databricks", {"type": "databricks", "host": "adb-1.2.azuredatabricks.net"}
)
REDSHIFT = policy_for(
    "rs", "redshift", {"type": "redshift", "host": "c.abc.eu-west-1.redshift.amazonaws.com"}
)
OPERATOR = policy_for(
    "sf",
    "snowflake",
    {"account": "a"},
    ("proxy.corp.example:8443", "*.blob.example.net", "10.1.2.3"),
)


@pytest.mark.parametrize(
    ("policy", "host", "port", "allowed"),
    [
        # The account host in both of Snowflake's spellings of `_`, any case, and its subhosts.
        (SNOWFLAKE, "myorg-my_acct.snowflakecomputing.com", 443, True),
        (SNOWFLAKE, "MYORG-MY-ACCT.snowflakecomputing.com.", 443, True),
        (SNOWFLAKE, "myorg-my-acct.privatelink.snowflakecomputing.com", 443, False),
        (SNOWFLAKE, "x.myorg-my-acct.snowflakecomputing.com", 443, True),
        (SNOWFLAKE, "otherorg-acct.snowflakecomputing.com", 443, False),
        (SNOWFLAKE, "ocsp.snowflakecomputing.com", 80, True),
        (SNOWFLAKE, "ocsp.digicert.com", 80, True),
        (SNOWFLAKE, "ocsp.digicert.com", 8080, False),
        # A stage's bucket, its name holding dots, on the global and a regional endpoint.
        (SNOWFLAKE, "sfc-stage.eu.prod.s3.amazonaws.com", 443, True),
        (SNOWFLAKE, "sfc-stage.eu.s3.eu-west-1.amazonaws.com", 443, True),
        (SNOWFLAKE, "s3.amazonaws.com", 443, False),
        (SNOWFLAKE, "evil.com", 443, False),
        (BIGQUERY, "oauth2.googleapis.com", 443, True),
        (BIGQUERY, "us-central1-dataproc.googleapis.com", 443, True),
        (BIGQUERY, "x.us-central1-dataproc.googleapis.com", 443, False),
        (BIGQUERY, "dataproc.googleapis.com", 443, True),
        (BIGQUERY, "compute.googleapis.com", 443, False),
        (BIGQUERY, "metadata.google.internal", 80, False),
        (DATABRICKS, "adb-1.2.azuredatabricks.net", 443, True),
        (DATABRICKS, "adb-9.2.azuredatabricks.net", 443, False),
        (DATABRICKS, "acct.dfs.core.windows.net", 443, True),
        (REDSHIFT, "c.abc.eu-west-1.redshift.amazonaws.com", 443, True),
        (REDSHIFT, "sts.eu-west-1.amazonaws.com", 443, True),
        (REDSHIFT, "iam.amazonaws.com", 443, False),
        # The operator's hosts: a port named is the only port; an address matches only itself.
        (OPERATOR, "proxy.corp.example", 8443, True),
        (OPERATOR, "proxy.corp.example", 443, False),
        (OPERATOR, "a.b.blob.example.net", 80, True),
        (OPERATOR, "10.1.2.3", 443, True),
        (OPERATOR, "10.1.2.4", 443, False),
        (OPERATOR, "3.2.1.10", 443, False),
    ],
)
def test_a_policy_allows_exactly_the_hosts_its_adapter_and_operator_name(
    policy, host, port, allowed
):
    assert policy.allows(host, port) is allowed


@pytest.mark.parametrize("policy", [SNOWFLAKE, BIGQUERY, DATABRICKS, REDSHIFT, OPERATOR])
@pytest.mark.parametrize(
    "host",
    ["169.254.169.254", "fd00:ec2::254", "metadata.google.internal", "127.0.0.1", "::1",
     "localhost", "0.0.0.0", "nats", "postgres"],
)  # fmt: skip
@pytest.mark.parametrize("port", [80, 443])
def test_no_default_reaches_a_metadata_service_or_this_machine(policy, host, port):
    assert not policy.allows(host, port)


def test_a_profile_names_hosts_never_patterns():
    """A project's profile with a `*` in its host or account would widen its own egress."""
    wide = policy_for("w", "snowflake", {"host": "*.amazonaws.com", "account": "*"}, ())
    assert [r.pattern for r in wide.rules if "amazonaws" in r.pattern and r.pattern[0] == "*"] == [
        "*.s3.amazonaws.com",
        "*.s3.*.amazonaws.com",
    ]
    assert not wide.allows("sts.amazonaws.com", 443)
    assert not wide.allows("anyone.snowflakecomputing.com", 443)


def test_the_refusal_names_the_host_and_the_setting_that_allows_it():
    text = SNOWFLAKE.refusal("Evil.COM.", 443)
    assert "evil.com:443" in text
    assert 'allow_hosts: ["evil.com:443"]' in text
    assert "'sf' (snowflake)" in text
    allowed = policy_for("sf", "snowflake", {"account": "a"}, ("evil.com:443",))
    assert allowed.allows("evil.com", 443)
    assert "no adapter" in policy_for("x", "", {}).refusal("h.example", 80)


@pytest.mark.parametrize(
    ("text", "pattern", "port"),
    [
        ("Host.Example.COM.", "host.example.com", None),
        ("host.example.com:8443", "host.example.com", 8443),
        ("*.s3.amazonaws.com", "*.s3.amazonaws.com", None),
        ("*-dataproc.googleapis.com", "*-dataproc.googleapis.com", None),
        ("[2001:db8::1]:443", "2001:db8::1", 443),
        ("[2001:db8::1]", "2001:db8::1", None),
        ("2001:db8::1", "2001:db8::1", None),
        ("10.0.0.1:5432", "10.0.0.1", 5432),
    ],
)
def test_a_rule_is_read_as_written(text, pattern, port):
    rule = parse_rule(text, "src")
    assert (rule.pattern, rule.port, rule.source) == (pattern, port, "src")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("*.com", "whole domain"),
        ("*.co*", "whole domain"),
        ("*", "not a host name"),
        ("localhost", "not a host name"),
        ("a..b.com", "not a host name"),
        ("-a.b.com", "not a host name"),
        ("a/b.com", "not a host name"),
        ("127.1", "not a host name"),
        ("a.b.com:0", "no valid port"),
        ("a.b.com:65536", "no valid port"),
        ("a.b.com:http", "no valid port"),
        ("a.b.com:\u0663", "no valid port"),
        ("a.b.com:\u00b2", "no valid port"),
        ("[2001:db8::1]x", "no ':port'"),
        ("[2001:db8::1]:", "no valid port"),
        (f"{'a' * 64}.com", "not a host name"),
    ],
)
def test_a_bad_rule_is_refused_naming_its_source_and_what_is_wrong(text, says):
    with pytest.raises(ValueError, match="warehouse 'w' allow_hosts") as err:
        parse_rule(text, "warehouse 'w' allow_hosts")
    assert says in str(err.value)
    with pytest.raises(ValueError):
        policy_for("w", "snowflake", {}, (text,))


def test_a_relay_endpoint_is_one_host_and_its_port():
    assert parse_endpoint("replica.corp.example:5439", "relay") == ("replica.corp.example", 5439)
    assert parse_endpoint("[2001:db8::2]:5432", "relay") == ("2001:db8::2", 5432)
    for text in ("replica.corp.example", "*.corp.example:5432"):
        with pytest.raises(ValueError, match="host:port"):
            parse_endpoint(text, "relay")


@pytest.mark.parametrize(
    ("host", "ok"),
    [("a.example", True), ("localhost", True), ("10.0.0.1", True), ("::1", True),
     ("*.example", False), ("127.1", False), ("0x7f.1", False), ("2130706433", False),
     ("a..example", False),
     ("a b.example", False), ("", False)],
)  # fmt: skip
def test_a_request_names_an_address_or_a_name(host, ok):
    assert is_host(host) is ok
