"""Every deployment runs every service the stack composes (`ROLES` in
services/stack/composition.py), each as its own NATS user: the compose file, the Kubernetes
manifests the kustomization applies with their Secret's keys, and the NATS accounts. A role
added to the stack and left out of one of them fails here, naming it."""

from __future__ import annotations

import re

import yaml
from jetdbt.services.access.nats_users import SERVICE_USERS
from jetdbt.services.cli.parser import build_parser
from jetdbt.services.stack.composition import DATABASE_ROLES, ROLES

from tests.support.paths import DEPLOY

K8S = DEPLOY / "k8s"


def _documents(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def _deployments() -> dict[str, tuple[str, dict]]:
    """Each role the kustomization's Deployments serve: its namespace and its container."""
    (kustomization,) = _documents("kustomization.yaml")
    found = {}
    for name in kustomization["resources"]:
        for doc in _documents(name):
            if doc["kind"] != "Deployment":
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container.get("args", [])[:1] == ["serve"]:
                    found[container["args"][1]] = (doc["metadata"]["namespace"], container)
    return found


def _secrets() -> dict[tuple[str, str], dict[str, str]]:
    """The Secret template's keys and values, by namespace and name."""
    return {
        (d["metadata"]["namespace"], d["metadata"]["name"]): d["stringData"]
        for d in _documents("secret.template.yaml")
    }


def _compose() -> dict[str, dict]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]


def _compose_roles() -> dict[str, dict]:
    """Each role a compose service serves, and its environment."""
    return {
        s["command"][1]: s["environment"]
        for s in _compose().values()
        if s.get("command", [])[:1] == ["serve"]
    }


def _users(url: str) -> set[str]:
    """The NATS users a (comma-separated) NATS_URL connects as (compose's password is a
    `${VARIABLE:?...}`, which no URL parser reads)."""
    return {re.match(r"nats://([^:@/]*)", u.strip())[1] for u in url.split(",")}


def _secret_ref(container: dict, variable: str) -> tuple[str, str] | None:
    for env in container.get("env", []):
        if env["name"] == variable:
            ref = env["valueFrom"]["secretKeyRef"]
            return ref["name"], ref["key"]
    return None


def test_every_role_has_its_nats_user():
    assert sorted(ROLES.values()) == sorted(SERVICE_USERS)
    accounts = (DEPLOY / "nats" / "accounts.conf").read_text()
    for user in ROLES.values():
        assert f'user: "{user}"' in accounts, f"deploy/nats/accounts.conf has no user {user}"


def test_the_cli_serves_every_role():
    (commands,) = [a for a in build_parser()._actions if a.dest == "cmd"]
    (role,) = [a for a in commands.choices["serve"]._actions if a.dest == "role"]
    assert role.choices == [*ROLES, "all"]


def test_kubernetes_runs_every_role_of_the_stack():
    missing = set(ROLES) - set(_deployments())
    assert not missing, f"no Deployment in deploy/k8s/kustomization.yaml serves {missing}"


def test_each_kubernetes_role_connects_as_its_own_user_from_its_secret():
    secrets = _secrets()
    for role, (namespace, container) in _deployments().items():
        ref = _secret_ref(container, "NATS_URL")
        assert ref, f"{role}: NATS_URL does not come from a Secret"
        name, key = ref
        keys = secrets.get((namespace, name), {})
        assert key in keys, f"{role}: Secret {namespace}/{name} has no key {key}"
        assert _users(keys[key]) == {ROLES[role]}, f"{role}: {key} is not user {ROLES[role]}'s"


def test_compose_runs_every_role_as_its_own_user():
    served = _compose_roles()
    missing = set(ROLES) - set(served)
    assert not missing, f"deploy/compose.yaml has no service for {missing}"
    passwords = _compose()["nats-1"]["environment"]  # what nats-server reads the users' from
    for role, env in served.items():
        assert _users(env["NATS_URL"]) == {ROLES[role]}, f"{role}: not user {ROLES[role]}"
        for variable in re.findall(r"\$\{(\w+?)(?::\?[^}]*)?\}", env["NATS_URL"]):
            assert variable in passwords, f"{role}: the NATS servers are not given {variable}"


def test_compose_and_kubernetes_give_postgres_to_the_same_roles():
    in_compose = {r for r, env in _compose_roles().items() if "DATABASE_URL" in env}
    in_k8s = {r for r, (_, c) in _deployments().items() if _secret_ref(c, "DATABASE_URL")}
    assert in_compose == in_k8s == set(DATABASE_ROLES)
