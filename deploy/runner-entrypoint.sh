#!/bin/sh
# The runner's entrypoint in a container (deploy/compose.yaml, deploy/k8s/runner.yaml):
# gives the sandbox the cgroup v2 group it delegates from (JETDBT_CGROUP), then runs
# `jetdbt ARGS`. The container's cgroup namespace shows the container's own group at
# /sys/fs/cgroup, mounted read-only by the runtime: that mount is made writable (a bind
# remount: the mount's flag only, never the cgroup filesystem's options; this needs
# CAP_SYS_ADMIN and a seccomp and AppArmor profile that allow mount), and every process
# of the container (this one, an init before it) moves into a leaf group `runner`, so
# the container's group holds no process itself and may enable memory and cpu for each
# invocation's group (the kernel's rule).
# Anything missing is left for the runner to report: its start line and /healthz say
# what, and it refuses projects until it is given.
set -u
cg=${JETDBT_CGROUP:-/sys/fs/cgroup}
move_all() {
    for pid in $(cat "$1"); do
        echo "$pid" > "$2" 2>/dev/null || true  # one gone meanwhile (that cat)
    done
    [ -z "$(cat "$1")" ]
}
if [ -f "$cg/cgroup.controllers" ] \
    && mount -o remount,bind,rw "$cg" \
    && mkdir -p "$cg/runner" \
    && move_all "$cg/cgroup.procs" "$cg/runner/cgroup.procs"; then
    :
else
    echo "jetdbt-runner: could not delegate the cgroup v2 group $cg" >&2
fi
exec jetdbt "$@"
