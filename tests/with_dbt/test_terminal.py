"""The terminal as a dbt user sees it: the CLI under a pseudo-terminal (pexpect) against a
real stack, what it printed rendered by a terminal emulator (pyte) and read off the screen."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pyte
import pytest
import pytest_asyncio

from tests.support.gate import GATE_MODEL, add_gate
from tests.support.helpers import JETDBT, cli_env, get_json, jetdbt, wait_for
from tests.support.paths import EXAMPLE
from tests.support.shared_stack import shared_stack

ROWS = 200  # tall enough that nothing scrolls off: the whole session stays on the screen
# The live area's counts: "12/23 finished, 10 passed, 2 running  0:05".
PROGRESS = re.compile(r"\d+(/\d+| finished)\b.*\d+ running\b")
NODE_LINE = re.compile(r"^\s+(ok|FAIL|WARN|skip|no-op)\s+(model|seed|test|snapshot)\s+(\S+)")
ESCAPE = b"\x1b"


def _terminal_env(env: dict) -> dict:
    """A colour terminal whose size is the pty's: what the environment says about colour or
    width is taken out, so the test decides it."""
    drop = ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM", "CLICOLOR_FORCE")
    return {**{k: v for k, v in env.items() if k not in drop}, "TERM": "xterm-256color"}


class Terminal:
    """A program on a pseudo-terminal of `cols` columns, its output fed to pyte as it comes."""

    def __init__(self, argv: list[str], env: dict, cols: int, rows: int = ROWS):
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        self.child = pexpect.spawn(argv[0], argv[1:], env=env, dimensions=(rows, cols))
        self.eof = False
        self.most_progress_lines = 0  # the most progress lines the screen ever held at once

    def _read(self, timeout: float) -> None:
        try:
            data = self.child.read_nonblocking(1 << 16, timeout)
        except pexpect.TIMEOUT:
            return
        except pexpect.EOF:
            self.eof = True
            return
        self.raw += data
        self.stream.feed(data)
        self.most_progress_lines = max(self.most_progress_lines, self.progress_lines())

    async def pump(self, timeout: float = 0.1) -> None:
        """Read what the program wrote (off the event loop: the stack runs on it)."""
        await asyncio.to_thread(self._read, timeout)

    async def until(self, predicate, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if self.eof:
                raise AssertionError("the program ended first:\n" + self.text())
            if time.monotonic() > deadline:
                raise AssertionError("timed out; the screen:\n" + self.text())
            await self.pump()

    async def finish(self, timeout: float = 300) -> int:
        deadline = time.monotonic() + timeout
        while not self.eof:
            assert time.monotonic() < deadline, "the program did not end:\n" + self.text()
            await self.pump()
        self.child.close()
        return self.child.exitstatus if self.child.exitstatus is not None else -1

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.lines()).rstrip()

    def progress_lines(self) -> int:
        return sum(len(PROGRESS.findall(line)) for line in self.lines())

    def colour_of(self, word: str) -> str | None:
        """The foreground colour of the first screen cell where `word` starts a cell run."""
        for y, line in enumerate(self.lines()):
            x = line.find(word)
            if x >= 0:
                return self.screen.buffer[y][x].fg
        return None


def _running_line(term: Terminal) -> str | None:
    return next((line for line in term.lines() if line.startswith("running: ")), None)


def _shows(shown: str, name: str) -> bool:
    """`shown` is `name`, or `name` cut with an ellipsis to fit the width."""
    return shown == name or (shown.endswith("…") and name.startswith(shown[:-1]))


def _node_lines(lines: list[str]) -> list[str]:
    """The names on finished-node lines, above the result table."""
    head = next((i for i, line in enumerate(lines) if line.split()[:2] == ["outcome", "dbt"]), None)
    return [m.group(3) for line in lines[:head] if (m := NODE_LINE.match(line))]


def _keep_screen(term: Terminal, name: str) -> None:
    """With JETDBT_SCREENS=DIR, the rendered screen is written there (docs/guide.md quotes it)."""
    if folder := os.environ.get("JETDBT_SCREENS"):
        (Path(folder) / f"{name}.txt").write_text(term.text() + "\n")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shop(tmp_path_factory, pg_url, environments_cache):
    """One stack for the module's builds, the example deployed with a model that holds the
    build open until `release` exists: one deploy (a dbt parse) for all of them."""
    folder = tmp_path_factory.mktemp("terminal")
    async with shared_stack(folder, pg_url, environments_cache) as stack:
        project = folder / "jaffle_shop"
        shutil.copytree(EXAMPLE, project)
        release = folder / "release"
        add_gate(project, release)
        # Held on a seed, so the data test a run makes fail (on orders) does not skip it.
        gate = project / "models" / "marts" / "gate.py"
        gate.write_text(GATE_MODEL.replace('dbt.ref("orders")', 'dbt.ref("raw_customers")'))
        deployed = await jetdbt(stack, "deploy", str(project))
        assert deployed.returncode == 0, deployed.stderr
        yield stack, release


@pytest_asyncio.fixture(loop_scope="module")
async def gated(shop):
    """The shared stack with its gate closed; after the test every run of it has ended, so
    the next test's build is the only one."""
    stack, release = shop
    release.unlink(missing_ok=True)
    yield stack, release
    release.write_text("go")

    async def all_ended():
        status, body = await get_json(f"{stack.api_url}/v1/projects/jaffle_shop/runs")
        return status == 200 and all(run["finished_at"] for run in body["runs"])

    await wait_for(all_ended, timeout=180)


@pytest.mark.dbt
@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("cols", [80, 160])
async def test_live_display_redraws_in_place_and_ends_in_the_result(gated, cols):
    stack, release = gated
    env = _terminal_env(cli_env(stack))
    argv = [JETDBT, "run", "jaffle_shop", "--watch", "--run-id", f"live{cols}"]
    term = Terminal([*argv, "--vars", "{fail_error_test: true}"], env, cols)
    try:
        await term.until(lambda: "gate" in (_running_line(term) or ""))
        assert term.progress_lines() == 1, term.text()
        _keep_screen(term, f"during-{cols}")
        release.write_text("go")
        code = await term.finish()
    finally:
        release.write_text("go")
        term.child.close(force=True)
    screen = term.text()
    lines = term.lines()
    _keep_screen(term, f"after-{cols}")
    assert code == 1, screen  # the data test made to fail fails the run
    assert term.most_progress_lines == 1, "more than one progress line was on the screen"
    assert term.progress_lines() == 0, screen  # the live area gave way to the result
    assert all(len(line) <= cols for line in lines)
    status, body = await get_json(f"{stack.api_url}/v1/runs/live{cols}")
    names = sorted(n["name"] for n in body["nodes"])
    shown = _node_lines(lines)
    assert len(shown) == len(names), screen  # every finished node, once each
    for name in names:
        assert sum(_shows(line, name) for line in shown) == 1, (name, screen)
    table = next(i for i, line in enumerate(lines) if line.split()[:2] == ["outcome", "dbt"])
    first = lines[table + 2].split()
    assert first[:2] == ["failed", "fail"], screen  # failures first, with their message
    assert lines[table + 3].lstrip().startswith("└"), screen
    assert any(line.startswith("FAILED: ") and "failed=1" in line for line in lines), screen
    assert f"run id: live{cols}" in screen
    assert f"viewer: {stack.api_url}/ui/#/runs/live{cols}" in screen
    assert f"api:    {stack.api_url}/v1/runs/live{cols}" in screen
    assert term.colour_of("FAIL ") == "red"
    assert term.colour_of("  ok ") in (None, "green") and term.colour_of("ok ") == "green"


@pytest.mark.dbt
@pytest.mark.asyncio(loop_scope="module")
async def test_no_color_prints_no_escape_code_and_pipes_get_the_plain_lines(shop):
    stack, _ = shop  # the gate is not in the selection
    select = ["-s", "+stg_orders"]
    env = {**_terminal_env(cli_env(stack)), "NO_COLOR": "1"}
    term = Terminal([JETDBT, "run", "jaffle_shop", "--watch", *select, "--run-id", "nc"], env, 80)
    assert await term.finish() == 0, term.text()
    assert ESCAPE not in term.raw, bytes(term.raw)

    piped = await jetdbt(stack, "run", "jaffle_shop", "--watch", *select, "--run-id", "piped")
    assert piped.returncode == 0, piped.stderr
    assert ESCAPE.decode() not in piped.stdout
    # The same lines whether piped or NO_COLOR, and the lines scripts read, pinned:
    _assert_plain(piped.stdout, "piped")
    _assert_plain(term.raw.decode().replace("\r\n", "\n"), "nc")


def _assert_plain(output: str, run_id: str) -> None:
    """Today's piped output, line for line: each line is read back and must be exactly what
    the pinned format writes (node lines come in the order dbt finished them)."""
    lines = output.rstrip("\n").split("\n")
    assert re.fullmatch(rf"run {run_id} started \(attempt 1\) on \S+", lines[0]), lines[0]
    head = lines.index(
        f"{'outcome':<8} {'dbt status':<12} {'type':<9} {'node':<48} {'rows':>6} {'time':>7}"
    )
    finished = lines[1:head]
    for line in finished:
        mark, kind, name, took = line.split()
        assert line == f"  {mark:>5}  {kind:<9} {name:<48} {took:>8}", line
    # Names are printed whole: a script reads them, and a terminal's width is not a pipe's.
    assert sorted(line.split()[2] for line in finished) == [
        "accepted_values_stg_orders_status__placed__shipped__completed__return_pending__returned",
        "not_null_stg_orders_order_id",
        "raw_orders",
        "stg_orders",
        "unique_stg_orders_order_id",
    ]
    rows = lines[head + 1 : head + 1 + len(finished)]
    for line in rows:
        outcome, status, kind, name, *rest = line.split()
        count, took = rest if len(rest) == 2 else ("", rest[0])
        assert outcome == "passed" and status in ("success", "pass"), line
        assert line == (f"{outcome:<8} {status:<12} {kind:<9} {name:<48} {count:>6} {took:>7}"), (
            line
        )
    assert "…" not in output
    tail = lines[head + 1 + len(finished) :]
    assert len(tail) == 2, output
    totals = r"PASSED: passed=5 \(dbt-core\S* \S+, warehouse main, target \S*\)"
    assert re.fullmatch(totals, tail[0]), tail[0]
    assert tail[1] == f"run id: {run_id}"


@pytest.mark.dbt
@pytest.mark.asyncio(loop_scope="module")
async def test_ctrl_c_stops_following_and_the_run_goes_on(gated):
    stack, release = gated
    env = _terminal_env(cli_env(stack))
    term = Terminal([JETDBT, "run", "jaffle_shop", "--watch", "--run-id", "detach"], env, 100)
    try:
        await term.until(lambda: "gate" in (_running_line(term) or ""))
        term.child.sendintr()  # Ctrl-C, as the terminal sends it to the foreground
        code = await term.finish(timeout=30)
    except BaseException:
        release.write_text("go")
        raise
    finally:
        term.child.close(force=True)
    screen = term.text()
    assert code == 130, screen
    assert "stopped following run detach; the run goes on" in screen
    assert "follow it: jetdbt logs detach --follow" in screen, screen
    assert "cancel it: jetdbt cancel detach" in screen
    assert term.progress_lines() == 0, (screen, bytes(term.raw[-3000:]))
    assert "?" not in screen.split("stopped following")[1]  # it asks nothing

    # The hint as written follows the run: its log lines as they come, until it ends.
    hint = screen.split("follow it: ")[1].splitlines()[0].split()
    assert hint[:1] == ["jetdbt"], hint
    follow = Terminal([JETDBT, *hint[1:]], env, 100)
    try:
        await follow.until(lambda: "gate" in follow.text())
        assert not follow.eof, follow.text()  # still following: the run waits at the gate
        release.write_text("go")
        assert await follow.finish(timeout=180) == 0, follow.text()  # the run passed
    finally:
        release.write_text("go")
        follow.child.close(force=True)

    async def passed():
        status, body = await get_json(f"{stack.api_url}/v1/runs/detach")
        return status == 200 and body["status"] == "passed"

    await wait_for(passed, timeout=180)


def _descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def _mentioning(text: str) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


def _described(pids: set[int]) -> dict[int, str]:
    """Each process's command line, to say what outlived `up`."""
    found = {}
    for pid in pids:
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            found[pid] = "(gone)"
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _hang_up(term: Terminal) -> None:
    """The terminal window closes: the pty's master goes, the kernel hangs up the session."""
    os.close(term.child.child_fd)
    term.child.closed = True


STOPS = {
    "window closed": _hang_up,
    "ctrl-c": lambda term: term.child.sendintr(),
    "sigterm": lambda term: os.kill(term.child.pid, signal.SIGTERM),
}


def _exit_code(term: Terminal, pid: int) -> int | None:
    """The exit code of the terminal's process once it ended, else None. pexpect reaps the
    process itself when a read meets the end of the terminal; then it holds the status."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        term.child.isalive()
        signalled = term.child.signalstatus
        return -signalled if signalled is not None else term.child.exitstatus
    return os.waitstatus_to_exitcode(status) if done else None


@pytest.mark.parametrize(
    "how, when", [*((how, "up") for how in STOPS), ("window closed", "starting")]
)
async def test_up_stops_everything_it_started(tmp_path, how, when):
    """However `jetdbt up` is stopped, even while it is still starting, nothing it started
    (nats-server, Postgres, the warm dbt) outlives it."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    env.update({"JETDBT_HOME": str(home), "JETDBT_API_PORT": "0"})
    term = Terminal([JETDBT, "up"], _terminal_env(env), 80, rows=24)
    pid = term.child.pid
    seen: set[int] = set()
    try:
        if when == "up":
            await term.until(lambda: "jetdbt is up" in term.text(), timeout=120)
            assert len(_mentioning(str(home))) >= 2, "no nats-server or Postgres found"
        else:
            await term.until(lambda: bool(_descendants(pid)), timeout=120)
        seen |= _descendants(pid)
        STOPS[how](term)
        deadline = time.monotonic() + 90
        while True:
            seen |= _descendants(pid) | _mentioning(str(home))
            code = _exit_code(term, pid)
            if code is not None:
                break
            assert time.monotonic() < deadline, f"jetdbt up outlived {how}"
            if not term.child.closed:
                await term.pump()
            else:
                await asyncio.sleep(0.1)
        assert code == 0
        # What a death signal killed as `up` ended is given a moment to finish dying (a
        # large process takes a while to release its memory); nothing may go on running.
        deadline = time.monotonic() + 5
        while left := {p for p in seen | _mentioning(str(home)) if _alive(p)}:
            assert time.monotonic() < deadline, f"still running: {_described(left)}"
            await asyncio.sleep(0.1)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _completions(env: dict, line: str, out: Path) -> list[str]:
    """What the shell's tab offers after `line`, asked as argcomplete's shell hook asks."""
    asked = {
        **env,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
    }
    subprocess.run([JETDBT], env=asked, capture_output=True, timeout=60)
    return sorted(word.strip() for word in out.read_text().split("\n") if word.strip())


@pytest.mark.dbt
async def test_tab_completes_commands_options_and_deployed_projects(stack, tmp_path):
    env = cli_env(stack)

    async def offered(*lines: str) -> list[list[str]]:
        """Each line's offers, asked at once (each its own answer file)."""
        out = tmp_path / "completions"
        asked = (asyncio.to_thread(_completions, env, line, out.with_suffix(f".{i}"))
                 for i, line in enumerate(lines))  # fmt: skip
        return list(await asyncio.gather(*asked))

    def projects(words: list[str]) -> list[str]:
        return [word for word in words if not word.startswith("-")]

    command, option, before = await offered("jetdbt ru", "jetdbt run x --wa", "jetdbt run ")
    assert command == ["run"]
    assert option == ["--watch"]
    assert projects(before) == []
    assert (await jetdbt(stack, "deploy", str(EXAMPLE))).returncode == 0
    lines = ("jetdbt run ", "jetdbt run jaf", "jetdbt status --project j", "jetdbt run x")
    after = [projects(words) for words in await offered(*lines)]
    assert after == [["jaffle_shop"], ["jaffle_shop"], ["jaffle_shop"], []]


async def test_status_imports_no_event_loop_bus_or_http_client(stack):
    """`jetdbt status` starts fast because it imports only what it uses, the API call and
    the lag table included."""
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-X", "importtime", JETDBT, "status"],
        env=cli_env(stack),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "stream DBT_EVENTS last sequence" in done.stdout
    imported = {
        line.split("|")[-1].strip().split(".")[0]
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert not imported & {"aiohttp", "rich", "dbt", "nats", "asyncio", "structlog", "yaml"}


def test_commands_that_publish_import_nats_without_aiohttp():
    """nats-py imports aiohttp for websocket servers alone: `jetdbt run` and the other
    commands that publish go without it; `up`, which serves the API, still has it."""
    script = (
        "import sys\n"
        "from jetdbt.services.cli import entry\n"
        "entry._command(sys.argv[1])\n"
        "print('nats' in sys.modules, 'aiohttp' in sys.modules)\n"
    )
    expected = {"run": "True False", "cancel": "True False", "up": "True True"}
    started = {  # at once: each is an interpreter importing the CLI
        command: subprocess.Popen(
            [sys.executable, "-c", script, command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for command in expected
    }
    for command, proc in started.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (command, err[-2000:])
        assert out.strip() == expected[command], (command, out, err[-2000:])


def test_a_queued_run_shows_why_in_the_live_area():
    """RunQueued's reason and place take the live area's status line until the run starts."""
    from jetdbt.services.cli.display import LiveArea
    from jetdbt.services.cli.watch import Tally
    from jetdbt.shared.bus import events as ev
    from rich.console import Console

    tally = Tally(total=24)
    reason = "environment main is building run r0"
    queued = ev.RunQueued(project="p", run_id="r1", attempt=1, reason=reason, position=2)
    tally.apply(queued)
    console = Console(width=80, record=True, force_terminal=True, color_system="standard")
    console.print(LiveArea(tally))
    shown = console.export_text().splitlines()
    assert shown[1] == f"queued: {reason} (position 2)"
    assert "0/24" in shown[0] and len(shown) == 2
    tally.apply(ev.RunStarted(project="p", run_id="r1", attempt=1, version="v"))
    console.print(LiveArea(tally))
    assert "queued" not in console.export_text()


def test_a_hostile_node_name_or_message_is_shown_as_written():
    """Markup and escape codes in what dbt reports are text on the screen, never commands
    (a model's file name can hold ESC); the plain lines show them the same way."""
    from jetdbt.services.cli.display import node_line, result_renderable
    from jetdbt.services.cli.watch import result_table
    from jetdbt.shared.bus import events as ev
    from rich.console import Console

    from tests.support.synthetic import failed_result

    name, message = "[bold red]evil[/]\x1b[2J", "[/] boom [link=x]\x1b]8;;x\x07"
    node = ev.NodeResult(
        unique_id="model.p.evil",
        status="error",
        outcome="failed",
        resource_type="model",
        name=name,
        message=message,
        execution_time=1.0,
    )
    result = failed_result(node)
    console = Console(width=120, record=True, force_terminal=True, color_system="standard")
    console.print(node_line(node, 120))
    console.print(result_renderable(result, "r1", "http://127.0.0.1:1", 120))
    raw = console.export_text(styles=True, clear=False)
    assert "\x1b[2J" not in raw and "\x1b]8" not in raw
    shown = console.export_text()
    assert shown.count("[bold red]evil[/]\\x1b[2J") == 2, shown
    assert "└ [/] boom [link=x]\\x1b]8;;x\\x07" in shown, shown
    plain = result_table(result)
    assert "\x1b" not in plain and "[bold red]evil[/]\\x1b[2J" in plain
