"""What the fuzz properties share (tests/properties): the hypothesis profiles, the hostile
inputs, valid commands to mutate, and running an example's requests on the test's loop.

The suite runs SUITE_EXAMPLES per property; `JETDBT_FUZZ_EXAMPLES=N` selects the long
profile (`make fuzz`)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from jetdbt.shared.bus import commands

SUITE_EXAMPLES = 100
settings.register_profile(
    "jetdbt-fuzz",
    max_examples=SUITE_EXAMPLES,
    deadline=None,  # an example waits on real servers
    database=None,  # no example database in the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "jetdbt-fuzz-long",
    parent=settings.get_profile("jetdbt-fuzz"),
    max_examples=int(os.environ.get("JETDBT_FUZZ_EXAMPLES") or SUITE_EXAMPLES),
)
FUZZ = settings.get_profile(
    "jetdbt-fuzz-long" if os.environ.get("JETDBT_FUZZ_EXAMPLES") else "jetdbt-fuzz"
)

DIGEST = "sha256:" + "0" * 64
ID = "fzid"  # replaced by a fresh id in each example, so no two examples share a run

# Inputs that have hurt before, or would if a check were missing.
HOSTILE = (
    "", " ", "\x00", "a\x00b", "\x1b[31m", "..", "../../etc/passwd", "-x", "--empty",
    "--target-path /tmp", "$env:HOME", "{{ env_var('SECRET') }}", "*", ">", "dbt.cmd.run.x",
    "\u202egnp.exe", "😀", "Robert'); DROP TABLE runs;--", "%00", "sha256:" + "0" * 63,
    DIGEST.upper(), "_", "A", "a" * 129, "a" * 257, "\ufeffa", "ünïcödé",
)  # fmt: skip

RUN_BASES = [
    {
        "command": {"label": "build", "select": ["orders+"], "exclude": ["tag:slow"],
                    "vars": {"day": "2025-06-02"}, "full_refresh": False, "defer": None},
        "args": {"run_date": "2025-06-02"}, "run_id": ID, "requested_by": "ana", "hidden": False,
    },
    {"command": {"label": "retry", "dbt_retry_job": "r1"}, "run_id": ID, "requested_by": "ana"},
    {"command": {"label": "parse", "bundle_digest": DIGEST, "vars": {}}, "run_id": ID},
]  # fmt: skip


class OnLoop:
    """Runs a coroutine on the test's event loop from the thread hypothesis runs in."""

    def __init__(self, timeout: float = 60):
        self.loop = asyncio.get_running_loop()
        self.timeout = timeout

    def __call__(self, coro):
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop).result(self.timeout)
        except TimeoutError as exc:  # asyncio re-creates a TimeoutError, without hypothesis' notes
            raise AssertionError(f"timed out waiting on the bus: {exc!r}") from None


async def drive(prop: Callable[[], None]) -> None:
    """Run a @given property in a worker thread, its examples awaiting on this loop."""
    await asyncio.to_thread(prop)


hostile_text = st.one_of(
    st.sampled_from(HOSTILE),
    st.text(max_size=40),
    st.integers(129, 4000).map("x".__mul__),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


def json_slots(doc) -> list[tuple[Any, Any]]:
    """Every (container, key or index) of a JSON document, depth first."""
    found = []
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for key, value in list(items):
        found.append((doc, key))
        found += json_slots(value)
    return found


@st.composite
def mutated(draw, bases: list[dict]) -> bytes:
    """One of `bases` with 0-3 strings made hostile or values replaced, removed or added, then
    maybe cut, garbled, swapped for other JSON or bytes, or padded past the command limit."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(0, 3))):
        slots = json_slots(doc)
        strings = [(c, k) for c, k in slots if isinstance(c[k], str)]
        op = draw(st.sampled_from(("string", "string", "replace", "remove", "add")))
        if op == "add" or not slots:
            doc[draw(st.text(max_size=12))] = draw(json_values)
            continue
        container, key = draw(st.sampled_from(strings if op == "string" and strings else slots))
        if op == "remove":
            del container[key]
        else:
            container[key] = draw(hostile_text if op == "string" else json_values)
    data = json.dumps(doc, ensure_ascii=draw(st.booleans())).encode()
    how = draw(st.sampled_from(("as is",) * 6 + ("cut", "garbled", "json", "bytes", "padded")))
    if how == "cut":
        data = data[: draw(st.integers(0, len(data) - 1))]
    elif how == "garbled":
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    elif how == "json":
        data = json.dumps(draw(json_values)).encode()
    elif how == "bytes":
        data = draw(st.binary(max_size=64))
    elif how == "padded":
        data = data[:-1] + b', "pad": "' + b"x" * (commands.MAX_COMMAND_BYTES + 10) + b'"}'
    return data
