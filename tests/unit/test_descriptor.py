"""Every descriptor error names the key and what is allowed; absent means empty."""

from __future__ import annotations

import re

import pytest
from jetdbt.shared.project.descriptor import (
    Descriptor,
    DescriptorError,
    environment_names,
    in_environment,
    interpolate,
    is_dynamic,
    load,
    parse,
)

ERRORS = [
    ("thread: 3", ["'thread'", "did you mean 'threads'?", "allowed:"]),
    ("threads: 0", ["'threads'", "at least 1, got 0"]),
    ("threads: many", ["'threads' takes a whole number, got text: 'many'"]),
    ("engine: dbt-core-lx", ["'engine'", "did you mean 'dbt-core-1x'?", "fusion"]),
    ("test_behavior: biuld", ["'test_behavior'", "did you mean 'build'?", "after_all"]),
    ("profile: {warehose: x}", ["'warehose'", "profile", "did you mean 'warehouse'?"]),
    ("profile: {warehouse: 3}", ["'profile.warehouse' takes text, got a whole number: 3"]),
    ("select: tag:x", ["'select' takes a list"]),
    ("exclude: [1]", ["'exclude[0]' takes text"]),
    ("selector: '  '", ["'selector'", "empty"]),
    ("column_lineage: maybe", ["'column_lineage' takes true or false"]),
    ("vars: [1]", ["'vars' takes a mapping, got a list"]),
    ("vars: {day: '{{ select }}'}", ["'vars'", "{{ select }}", "reserved"]),
    ("full_refresh: 2", ["'full_refresh' takes true or false"]),
    ("env: {A: $foo}", ["'env.A'", "$env:NAME"]),
    ("env: {A: 3}", ["'env.A' takes text, got a whole number"]),
    ("env: {PATH: /tmp/bin}", ["'env.PATH' is refused", "the runner's"]),
    ("env: {LD_PRELOAD: x.so}", ["'env.LD_PRELOAD' is refused"]),
    # What would steer `dbt deps`' git, hub client or installers: a command, a hub, a CA.
    ("env: {GIT_SSH_COMMAND: 'sh -c id #'}", ["'env.GIT_SSH_COMMAND' is refused", "git"]),
    ("env: {GIT_CONFIG_COUNT: '1'}", ["'env.GIT_CONFIG_COUNT' is refused"]),
    ("env: {DBT_PACKAGE_HUB_URL: 'https://evil/'}", ["'env.DBT_PACKAGE_HUB_URL' is refused"]),
    ("env: {https_proxy: 'http://evil:3128'}", ["'env.https_proxy' is refused"]),
    ("env: {SSL_CERT_FILE: ca.pem}", ["'env.SSL_CERT_FILE' is refused"]),
    ("env: {REQUESTS_CA_BUNDLE: ca.pem}", ["'env.REQUESTS_CA_BUNDLE' is refused"]),
    ("env: {SSH_AUTH_SOCK: /s}", ["'env.SSH_AUTH_SOCK' is refused"]),
    ("env: {UV_INDEX_URL: 'https://evil/'}", ["'env.UV_INDEX_URL' is refused"]),
    ("retry_failed_nodes: {attempts: -1}", ["'retry_failed_nodes.attempts'", "at least 0"]),
    ("retry_failed_nodes: {attemps: 1}", ["'attemps'", "attempts, delay_seconds"]),
    ("retry_failed_nodes: {delay_seconds: -2}", ["'retry_failed_nodes.delay_seconds'"]),
    ("defer: sometimes", ["'defer' takes true or false"]),
    ("[1, 2]", ["mapping of keys, got a list"]),
    ("a: [", ["not valid YAML"]),
    # Environments: their names, their env and profile under the top level's rules.
    ("environments: [staging]", ["'environments' takes a mapping, got a list"]),
    ("environments: {Staging: {}}", ["'environments.Staging'", "lowercase letters"]),
    ("environments: {staging: 3}", ["'environments.staging' takes a mapping"]),
    ("environments: {staging: {shema: x}}", ["'shema' in environments.staging", "defer_to"]),
    ("environments: {staging: {profile: {shema: x}}}", ["environments.staging.profile", "schema"]),
    ("environments: {staging: {roles: [owner]}}", ["'owner'", "runner, deployer, admin"]),
    ("environments: {staging: {threads: 0}}", ["'environments.staging.threads'", "at least 1"]),
    ("environments: {staging: {env: {PATH: /x}}}", ["'environments.staging.env.PATH' is refused"]),
    ("environments: {ci: {env: {GIT_DIR: /x}}}", ["'environments.ci.env.GIT_DIR' is refused"]),
    ("environments: {staging: {env: {A: 3}}}", ["'environments.staging.env.A' takes text"]),
    ("environments: {staging: {env: {A: $x}}}", ["'environments.staging.env.A'", "$env:NAME"]),
    ("environments: {staging: {defer_to: qa}}", ["'qa'", "dev, prod, staging"]),
    (
        "environments: {staging: {profile: {profiles_yml: p.yml}}}",
        ["'environments.staging.profile.warehouse' is required"],
    ),
]


@pytest.mark.parametrize(("text", "needles"), ERRORS, ids=[e[0] for e in ERRORS])
def test_descriptor_errors_name_the_key(text, needles):
    with pytest.raises(DescriptorError) as info:
        parse(text)
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    # Words a descriptor's author reads, never the decoder's: no `int`, `str`, `object`.
    assert "`" not in message and "Expected" not in message, message
    assert not re.search(r"\b(int|str|bool|float|array|object|dict|NoneType)\b", message), message


def test_absent_or_empty_is_the_empty_descriptor(tmp_path):
    assert load(tmp_path) == Descriptor()
    (tmp_path / "jetdbt.yaml").write_text("")
    assert load(tmp_path) == Descriptor()


def test_full_descriptor_decodes():
    desc = parse(
        "engine: dbt-core-1x\nprofile: {warehouse: analytics, target: prod, schema: marts}\n"
        "select: ['tag:nightly+']\nexclude: []\ntest_behavior: after_all\n"
        "vars: {run_date: '{{ run_date }}', strict: false, n: 3}\nthreads: 8\n"
        "env: {DBT_PASSWORD: '$env:WH_PASSWORD', REGION: eu}\n"
        "retry_failed_nodes: {attempts: 2, delay_seconds: 1.5}\ndefer: true\n"
    )
    assert desc.profile.warehouse == "analytics" and desc.threads == 8
    assert desc.retry_failed_nodes.attempts == 2
    assert is_dynamic(desc)


def test_placeholders_keep_argument_types():
    tree = {"day": "{{ run_date }}", "n": "{{ n }}", "label": "run {{ n }}", "keep": 1}
    assert interpolate(tree, {"run_date": "2026-01-02", "n": 3}) == {
        "day": "2026-01-02",
        "n": 3,
        "label": "run 3",
        "keep": 1,
    }


def test_an_unnamed_engine_is_the_operators_default_and_a_bad_default_is_refused():
    from jetdbt.shared.process.config import load as load_settings

    assert parse("threads: 2\n").engine is None  # the runner's JETDBT_DEFAULT_ENGINE decides
    assert load_settings({}).default_engine == "dbt-core-1x"
    assert load_settings({"JETDBT_DEFAULT_ENGINE": "fusion"}).default_engine == "fusion"
    with pytest.raises(ValueError, match="JETDBT_DEFAULT_ENGINE='dbt3' is not an engine"):
        load_settings({"JETDBT_DEFAULT_ENGINE": "dbt3"})


def test_an_environment_sets_its_keys_over_the_top_level_and_an_unknown_one_is_named():
    desc = parse(
        "profile: {schema: main, target: dev}\nthreads: 2\nenv: {A: a, B: b}\n"
        "environments:\n  staging: {profile: {schema: stg}, env: {B: s}, roles: [admin]}\n"
    )
    staging = in_environment(desc, "staging")
    assert (staging.profile.schema, staging.profile.target) == ("stg", "dev")
    assert (staging.threads, staging.env) == (2, {"A": "a", "B": "s"})
    assert in_environment(desc, "").profile.schema == "main"
    assert environment_names(desc) == ["dev", "prod", "staging"]
    with pytest.raises(DescriptorError, match="no environment 'qa'.*dev, prod, staging"):
        in_environment(desc, "qa")
