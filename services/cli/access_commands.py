"""Who may do what, from the command line: API tokens, external systems' NATS users, and
the operator's step that applies streams.yaml. All of it needs the operator's NATS user
(the admin user `jetdbt up` generated, or NATS_USER/NATS_PASSWORD for a remote stack)."""

from __future__ import annotations

import re
from datetime import timedelta

from jetdbt.services.cli.common import CliError, open_bus
from jetdbt.shared.bus import subjects
from jetdbt.shared.identity import principals
from jetdbt.shared.process.config import Settings

__all__ = ["cmd_token", "cmd_access", "cmd_contract", "parse_duration"]

_DURATION = re.compile(r"([1-9][0-9]{0,5})([mhdw])\Z")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_duration(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `2w`."""
    found = _DURATION.match(text or "")
    if not found:
        raise CliError(f"--expires {text!r} is not a duration: use e.g. 90m, 12h, 30d or 2w")
    return timedelta(**{_UNITS[found[2]]: int(found[1])})


async def cmd_token(args, settings: Settings) -> int:
    expires = parse_duration(args.expires) if getattr(args, "expires", None) else None
    bus = await open_bus(settings)
    try:
        if args.token_cmd == "create":
            token, bearer = await principals.create_token(
                bus,
                principal=args.principal,
                team=args.team,
                role=args.role,
                project=args.project,
                expires_in=expires,
            )
            print(
                f"token {token.id} for {token.principal} ({token.team}, {token.role} on"
                f" {token.project!r}); shown once, keep it:"
            )
            print(bearer)
        elif args.token_cmd == "list":
            print(f"{'ID':<13} {'PRINCIPAL':<16} {'TEAM':<12} {'ROLE':<9} {'PROJECT':<16} EXPIRES")
            for t in await principals.list_tokens(bus):
                expiry = t.expires_at.isoformat(timespec="minutes") if t.expires_at else "never"
                who = f"{t.principal:<16} {t.team:<12} {t.role:<9} {t.project:<16}"
                print(f"{t.id:<13} {who} {expiry}")
        elif not await principals.revoke_token(bus, args.token_id):
            raise CliError(f"no token {args.token_id!r}: `jetdbt token list` shows them")
        else:
            print(f"token {args.token_id} revoked")
    except principals.IdentityError as exc:
        raise CliError(str(exc)) from None
    finally:
        await bus.close()
    return 0


async def cmd_access(args, settings: Settings) -> int:
    """`jetdbt access add-system NAME --team T --project P...`: a NATS user for another
    system of this folder's embedded stack, allowed its own commands and declared writes."""
    from jetdbt.services.access import nats_users

    bus = await open_bus(settings)
    try:
        known = await principals.load_principal(bus, args.name)
        if known is not None and known.kind != "system":
            # Its NATS user would publish as that person: run, retry and cancel as them.
            raise CliError(
                f"{args.name!r} is a person's principal (team {known.team!r}): a system's NATS"
                " user would speak for them; choose another system name"
            )
        try:
            password = nats_users.add_system(settings.home, args.name, args.project, args.role)
        except nats_users.AccessError as exc:
            raise CliError(str(exc)) from None
        grants = [principals.Grant(role=args.role, project=p) for p in args.project]
        await principals.put_principal(
            bus,
            principals.Principal(
                name=args.name, team=args.team, kind="system", grants=grants, nats_user=args.name
            ),
        )
    finally:
        await bus.close()
    reloaded = nats_users.reload_server(settings.home)
    verbs = [
        v for v, need in principals.VERB_ROLES.items() if principals.role_allows(args.role, need)
    ]
    print(
        f"NATS user {args.name} (team {args.team}, {args.role}) may publish dbt.cmd.<verb>."
        f"<project>.{args.name} ({', '.join(verbs)}) for {', '.join(args.project)} and"
        f" {subjects.intake_writes(args.name)} (declared writes a runner checks and records)"
    )
    print(f"password (shown once): {password}")
    if not reloaded:
        print("the embedded nats-server is not running: it reads the user when it starts")
    return 0


async def cmd_contract(args, settings: Settings) -> int:
    """`jetdbt contract apply`: the operator's step for a remote stack (services only check)."""
    from jetdbt.services.access.local import cli_nats_login
    from jetdbt.services.cli.common import endpoints
    from jetdbt.shared.bus import contract
    from jetdbt.shared.bus.connection import connect, shown

    nats_url, _ = endpoints(settings)
    user, password = cli_nats_login(settings)
    bus = await connect(
        nats_url,
        "jetdbt-contract",
        consumer_overrides=contract.consumer_overrides(settings),
        replicas=settings.stream_replicas if args.replicas is None else args.replicas,
        user=user,
        password=password,
    )
    await bus.close()
    print(f"streams.yaml applied to {shown(nats_url)}")  # never the password in the URL
    return 0
