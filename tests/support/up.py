"""`jetdbt up` as a user starts it, in a terminal of its own: what the first-hour and README
tests drive."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid
from pathlib import Path

from tests.support.helpers import JETDBT


class Up:
    """`jetdbt up` started in `folder`, as a user starts it; the CLI is run as a user in
    another terminal runs it, from any folder, finding the stack by itself."""

    def __init__(self, folder: Path, stacks: Path, pg_url: str):
        self.folder, self.stacks = folder, stacks
        env = self.env()
        env.update(
            DATABASE_URL=pg_url,  # the session's Postgres: an embedded one costs a start
            JETDBT_SCHEMA=f"t_{uuid.uuid4().hex[:12]}",
            JETDBT_API_PORT="0",
        )
        self.stderr = (folder / "up.stderr").open("w+")
        self.proc = subprocess.Popen(
            [JETDBT, "up"], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=self.stderr,
            text=True,
        )  # fmt: skip
        self.banner: list[str] = []
        ready = threading.Event()

        def read() -> None:
            for line in self.proc.stdout:
                self.banner.append(line.rstrip("\n"))
                if line.startswith("deploy with"):
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(180) or self.proc.poll() is not None:
            self.stop()
            raise AssertionError(f"jetdbt up did not come up: {self.banner} {self.errors()}")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in STACK_ENV}
        return {**env, "JETDBT_STACKS_DIR": str(self.stacks), "NO_COLOR": "1"}

    def cli(self, *args: str, cwd: Path, timeout: float = 300, **kw) -> subprocess.CompletedProcess:
        if "stdout" not in kw:
            kw.setdefault("capture_output", True)
        return subprocess.run(
            [JETDBT, *args], cwd=cwd, env=kw.pop("env", self.env()), text=True, timeout=timeout,
            **kw,
        )  # fmt: skip

    def errors(self) -> str:
        self.stderr.flush()
        return (self.folder / "up.stderr").read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Ctrl-C
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


# What points a CLI at a stack: a user's fresh terminal has none of these.
STACK_ENV = ("NATS_URL", "DATABASE_URL", "JETDBT_HOME", "JETDBT_TOKEN", "JETDBT_SCHEMA")
