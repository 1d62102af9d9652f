"""Where `jetdbt up` keeps the credentials it generated: JETDBT_HOME/access, files 0600.

Light on purpose (no nats, no aiohttp): the CLI reads these before every command. A
setting (NATS_USER and NATS_PASSWORD, JETDBT_TOKEN) wins over a file, for a remote stack.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from jetdbt.shared.process.config import Settings

__all__ = [
    "ADMIN",
    "access_dir",
    "admin_token_file",
    "cli_nats_login",
    "cli_token",
    "nats_logins",
    "users_file",
    "write_private",
]

ADMIN = "admin"


def access_dir(home: Path) -> Path:
    return home / "access"


def users_file(home: Path) -> Path:
    """Every NATS user's name, password and grants (the server's configuration is built
    from it)."""
    return access_dir(home) / "nats-users.json"


def admin_token_file(home: Path) -> Path:
    return access_dir(home) / "admin.token"


def write_private(path: Path, text: str) -> None:
    """Write `text` readable by this user only, from the first byte (never 0644 first)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def nats_logins(home: Path) -> dict[str, str]:
    """User name to password of the generated NATS users; empty when none were generated."""
    try:
        found = json.loads(users_file(home).read_text())
    except (OSError, ValueError):
        return {}
    return {name: user["password"] for name, user in found.get("users", {}).items()}


def cli_nats_login(settings: Settings) -> tuple[str | None, str | None]:
    """The CLI's NATS user: NATS_USER/NATS_PASSWORD, else the generated admin, else none."""
    if settings.nats_user:
        return settings.nats_user, settings.nats_password
    password = nats_logins(settings.home).get(ADMIN)
    return (ADMIN, password) if password else (None, None)


def cli_token(settings: Settings) -> str | None:
    """The CLI's API token: JETDBT_TOKEN, else the admin token `jetdbt up` generated."""
    if settings.token:
        return settings.token
    try:
        return admin_token_file(settings.home).read_text().strip() or None
    except OSError:
        return None
