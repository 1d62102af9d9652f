"""deploy/k8s: every manifest valid against the Kubernetes schemas (offline), and the runner
pod given exactly what its sandbox needs (services/runner/process/sandbox.py), no more, no less."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from jetdbt.services.runner.process.containment import readable_code
from jetdbt.shared.process.config import load

from tests.support.paths import DEPLOY

K8S = DEPLOY / "k8s"
VERSION = "1.33"  # a release the schemas of kubernetes-validate cover, checked strictly

# What building a sandbox takes (the child, before it drops everything) ...
ENTER = {
    "SYS_ADMIN": "unshare the namespaces, mount its root, pivot_root",
    "NET_ADMIN": "bring up its own loopback, add a warehouse's address to it",
    "SETUID": "drop the child and the relay to JETDBT_SANDBOX_UID",
    "SETGID": "setgroups and setresgid for the same",
    "SETPCAP": "empty the child's capability bounding set",
    "CHOWN": "hand the job folder to that uid",
}
# ... and what the runner does to what that uid left.
RUNNER = {
    "KILL": "kill a run's processes, which run as JETDBT_SANDBOX_UID",
    "DAC_OVERRIDE": "read, write and remove job folders that uid owns",
    "FOWNER": "change modes and times of that uid's files",
}


def _documents(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all() -> dict[str, list[dict]]:
    return {p.name: _documents(p) for p in sorted(K8S.glob("*.yaml"))}


def _one(kind: str, name: str) -> dict:
    found = [
        d
        for docs in _all().values()
        for d in docs
        if d["kind"] == kind and d.get("metadata", {}).get("name") == name
    ]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _runner_pod() -> dict:
    return _one("Deployment", "jetdbt-runner")["spec"]["template"]["spec"]


def test_every_manifest_is_valid_against_the_kubernetes_schemas():
    checked = 0
    for name, docs in _all().items():
        for doc in docs:
            if doc["kind"] == "Kustomization":
                continue
            try:
                kubernetes_validate.validate(doc, VERSION, strict=True)
            except kubernetes_validate.ValidationError as exc:
                path = ".".join(str(p) for p in exc.path)
                what = f"{doc['kind']}/{doc['metadata']['name']}"
                pytest.fail(f"{name}: {what}: {path}: {exc.message}")
            checked += 1
    assert checked >= 10


def test_the_kustomization_applies_every_manifest_but_the_secret_template():
    (kustomization,) = _documents(K8S / "kustomization.yaml")
    expected = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.template.yaml"}
    assert sorted(kustomization["resources"]) == sorted(expected)


def test_a_schema_violation_is_caught():
    broken = json.loads(json.dumps(_one("Deployment", "jetdbt-runner")))
    (container,) = broken["spec"]["template"]["spec"]["containers"]
    container["securityContext"]["capabilities"]["add"] = "SYS_ADMIN"  # a string, not a list
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSION, strict=True)


def test_the_runner_pod_gets_exactly_what_its_sandbox_needs():
    pod = _runner_pod()
    (container,) = pod["containers"]
    assert pod["securityContext"] == {
        "runAsUser": 0,
        "runAsGroup": 0,
        "runAsNonRoot": False,
        "seccompProfile": {"type": "Unconfined"},
        "appArmorProfile": {"type": "Unconfined"},
    }
    assert container["securityContext"] == {
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], "add": list({**ENTER, **RUNNER})},
    }
    assert container["command"] == ["jetdbt-runner"]  # deploy/runner-entrypoint.sh
    assert pod["automountServiceAccountToken"] is False
    assert (
        _one("Namespace", "jetdbt-runner")["metadata"]["labels"][
            "pod-security.kubernetes.io/enforce"
        ]
        == "privileged"
    )


def test_compose_gives_its_runner_the_same():
    compose = yaml.safe_load((K8S.parent / "compose.yaml").read_text())["services"]["runner"]
    assert compose["user"] == "0:0" and compose["entrypoint"] == ["jetdbt-runner"]
    assert compose["cap_drop"] == ["ALL"] and compose["cap_add"] == list({**ENTER, **RUNNER})
    assert {"seccomp=unconfined", "apparmor=unconfined"} <= set(compose["security_opt"])
    assert compose["environment"]["JETDBT_CGROUP"] == "/sys/fs/cgroup"


def test_only_the_runner_leaves_the_restricted_namespace():
    assert (
        _one("Namespace", "jetdbt")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        == "restricted"
    )
    placed = {
        d["metadata"]["name"]: d["metadata"]["namespace"]
        for docs in _all().values()
        for d in docs
        if d["kind"] in ("Deployment", "Job")
    }
    assert placed.pop("jetdbt-runner") == "jetdbt-runner"
    assert set(placed.values()) == {"jetdbt"}


def _quantity(text: str) -> float:
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "m": 1e-3}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def test_the_runner_pod_holds_max_concurrent_runs_of_run_memory_and_run_cpus():
    runner = _one("ConfigMap", "jetdbt-runner-config")["data"]
    shared = _one("ConfigMap", "jetdbt-config")["data"]
    for key in runner.keys() & shared.keys():
        assert runner[key] == shared[key], f"{key} differs between the two ConfigMaps"
    settings = load(runner)
    assert settings.sandbox and settings.cgroup == Path("/sys/fs/cgroup")
    (container,) = _runner_pod()["containers"]
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    assert requests["memory"] == limits["memory"]  # the scheduler reserves every run
    runs = settings.max_concurrent_runs
    own = _quantity(limits["memory"]) - runs * settings.run_memory
    assert 256 << 20 <= own <= 1 << 30, "the runner's own memory beside its runs"
    assert _quantity(limits["cpu"]) == runs * settings.run_cpus


_CHILD = """
import json, sys
from jetdbt.services.runner.process import sandbox
try:
    sandbox.enter(json.loads(sys.argv[1]), [1])
except Exception as exc:
    sandbox.fail(exc)
lines = open("/proc/self/status").read().splitlines()
status = dict(line.split(":\\t", 1) for line in lines if ":\\t" in line)
print(json.dumps({k: status[k].split()[0] for k in ("Uid", "CapBnd", "CapEff", "NoNewPrivs")}))
"""


def _enter_with(caps: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """A real sandbox built by a root process whose capabilities are only `caps`."""
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    spec = {
        "root": str(job),
        "readonly": readable_code(),
        "uid": 65534,
        "network": {"host": "192.0.2.7", "port": 5432},  # a warehouse's address on loopback
    }
    bounding = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
    return subprocess.run(
        ["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all",
         sys.executable, "-P", "-c", _CHILD, json.dumps(spec)],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv"
)


@needs_root
def test_the_sandbox_is_built_with_the_manifests_capabilities_and_keeps_none(tmp_path):
    (container,) = _runner_pod()["containers"]
    done = _enter_with(container["securityContext"]["capabilities"]["add"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "Uid": "65534", "CapBnd": "0000000000000000", "CapEff": "0000000000000000",
        "NoNewPrivs": "1",
    }  # fmt: skip


@needs_root
@pytest.mark.parametrize("missing", sorted(ENTER))
def test_each_capability_the_sandbox_takes_is_needed(missing, tmp_path):
    done = _enter_with([c for c in ENTER if c != missing], tmp_path)
    if done.returncode == 0:  # built, but it could not empty its bounding set
        assert missing == "SETPCAP"
        assert json.loads(done.stdout)["CapBnd"] != "0000000000000000"
    else:
        assert "jetdbt sandbox:" in done.stderr and "not permitted" in done.stderr


_ENTRYPOINT_CHECK = """
set -e
mount -t cgroup2 none "$1/v2"
mkdir "$1/v2/$2"
echo $$ > "$1/v2/$2/cgroup.procs"
mount --bind "$1/v2/$2" "$1/container" && mount -o remount,bind,ro "$1/container"
sh -c 'sleep 30 >/dev/null 2>&1 & exec sh "$0" serve runner' "$3"
"""


@needs_root
def test_the_runner_entrypoint_delegates_a_read_only_cgroup_v2_group(tmp_path):
    """deploy/runner-entrypoint.sh on a group mounted read-only as a runtime does: writable
    after, and every process of it (an init's stand-in too) in its leaf `runner`."""
    if not shutil.which("unshare") or "cgroup2" not in Path("/proc/filesystems").read_text():
        pytest.skip("needs unshare and cgroup2")
    (tmp_path / "v2").mkdir()
    (tmp_path / "container").mkdir()
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "jetdbt"  # in place of the runner: says where it runs
    fake.write_text(
        '#!/bin/sh\necho "args $*"; grep "^0::" /proc/self/cgroup\n'
        'echo "left [$(cat "$JETDBT_CGROUP/cgroup.procs")]"\n'
        'grep " $JETDBT_CGROUP " /proc/self/mountinfo | cut -d" " -f6\n'
        'for p in $(cat "$JETDBT_CGROUP/runner/cgroup.procs"); do\n'
        '  [ "$(cat /proc/$p/comm)" = sleep ] && kill "$p"; done; true\n'
    )
    fake.chmod(0o755)
    group = f"jetdbt-test-{os.getpid()}"
    entrypoint = K8S.parent / "runner-entrypoint.sh"
    env = {**os.environ, "JETDBT_CGROUP": str(tmp_path / "container"),
           "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}  # fmt: skip
    try:
        done = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", _ENTRYPOINT_CHECK, "-",
             str(tmp_path), group, str(entrypoint)],
            capture_output=True, text=True, timeout=30, env=env,
        )  # fmt: skip
    finally:
        _remove_group(group)
    if "cgroup2" in done.stderr and done.returncode != 0 and "mount" in done.stderr:
        pytest.skip(f"cgroup2 cannot be mounted here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == [
        "args serve runner",
        f"0::/{group}/runner",
        "left []",
        "rw,relatime",
    ], done.stdout + done.stderr


def _remove_group(group: str) -> None:
    """The test's cgroup v2 groups, their processes back in the root group first."""
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'd=$(mktemp -d) && mount -t cgroup2 none "$d" && g="$d/$1"'
         ' && for p in $(cat "$g/runner/cgroup.procs" "$g/cgroup.procs" 2>/dev/null);'
         ' do echo "$p" > "$d/cgroup.procs"; done;'
         ' rmdir "$g/runner" "$g" 2>/dev/null; umount "$d"; rmdir "$d"', "-", group],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
