"""What the terminal prints of a result, whatever the stream: a failed node's cause (dbt's
first lines, bounded), a show's rows as a table, and a live line with done/total."""

from __future__ import annotations

from jetdbt.services.cli import tables
from jetdbt.services.cli.display import LiveArea, node_line, result_renderable
from jetdbt.services.cli.graph_summary import graph_lines
from jetdbt.services.cli.plural import counted
from jetdbt.services.cli.watch import ERROR_LINES, Tally, message_lines, result_table
from jetdbt.shared.bus import events as ev
from jetdbt.shared.wording.ages import age
from rich.console import Console

from tests.support.synthetic import failed_result

CAUSE = (
    "Runtime Error in model broken (models/broken.sql)\n"
    "  Conversion Error: Could not convert string 'abc' to INT32\n"
    "\n"
    "  LINE 1: select cast('abc' as int) as x"
)

# What dbt-duckdb's run_results.json said of a Python model whose helper's int() failed.
PY_CAUSE = "\n".join(
    [
        "Runtime Error in model broken (models/broken.py)",
        "  Python model failed:",
        "  Traceback (most recent call last):",
        '    File "/venv/lib/python3.11/site-packages/dbt/adapters/duckdb/environments'
        '/__init__.py", line 286, in run_python_job',
        "      df = module.model(dbt, con)",
        "           ^^^^^^^^^^^^^^^^^^^^^^",
        '    File "/tmp/tmpq1w2e3r4.py", line 19, in model',
        '      result = checked([["10", "20"], ["abc"]])',
        "               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '    File "/tmp/tmpq1w2e3r4.py", line 14, in checked',
        '      return {"total": totals(rows)}',
        "                       ^^^^^^^^^^^^",
        '    File "/tmp/tmpq1w2e3r4.py", line 10, in totals',
        "      return sum(sum(parse_all(r)) for r in rows)",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '    File "/tmp/tmpq1w2e3r4.py", line 10, in <genexpr>',
        "      return sum(sum(parse_all(r)) for r in rows)",
        "                     ^^^^^^^^^^^^",
        '    File "/tmp/tmpq1w2e3r4.py", line 6, in parse_all',
        "      return [parse_amount(t) for t in texts]",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        '    File "/tmp/tmpq1w2e3r4.py", line 6, in <listcomp>',
        "      return [parse_amount(t) for t in texts]",
        "              ^^^^^^^^^^^^^^^",
        '    File "/tmp/tmpq1w2e3r4.py", line 2, in parse_amount',
        "      return int(text)",
        "             ^^^^^^^^^",
        "  ValueError: invalid literal for int() with base 10: 'abc'",
        "  ",
    ]
)


def _result(message: str, preview: list | None = None) -> ev.RunResult:
    node = ev.NodeResult(
        unique_id="model.p.broken",
        status="error",
        outcome="failed",
        resource_type="model",
        name="broken",
        message=message,
    )
    return failed_result(node, preview=preview or [])


def _rich(result: ev.RunResult) -> str:
    console = Console(width=120, record=True, force_terminal=True, color_system="standard")
    console.print(result_renderable(result, "r1", "http://127.0.0.1:1", 120))
    return console.export_text()


def test_a_failed_node_shows_dbt_s_cause_in_plain_rich_and_status_output():
    plain, rich = result_table(_result(CAUSE)), _rich(_result(CAUSE))
    record = {
        "run_id": "r1",
        "project": "p",
        "status": "failed",
        "nodes": [{"unique_id": "model.p.broken", "status": "error", "outcome": "failed",
                   "name": "broken", "message": CAUSE}],
    }  # fmt: skip
    status = tables.run_table(record)
    for shown in (plain, rich, status):
        assert "Runtime Error in model broken" in shown, shown
        assert "Conversion Error: Could not convert string 'abc' to INT32" in shown, shown
        assert "LINE 1: select cast('abc' as int) as x" in shown, shown


def test_a_long_message_is_cut_to_its_first_lines_saying_how_many_more():
    message = "\n".join(f"line {i}" for i in range(40))
    plain = result_table(_result(message))
    assert f"line {ERROR_LINES - 2}" in plain and f"line {ERROR_LINES - 1}" not in plain
    assert f"... {40 - ERROR_LINES + 1} more lines" in plain, plain


def test_a_python_model_s_traceback_keeps_its_exception_after_its_first_lines():
    """A traceback's cause is its last line: shown after the first lines, the frames between
    them counted, wherever the failed node is shown."""
    record = {"run_id": "r1", "project": "p", "status": "failed", "nodes": [
        {"unique_id": "model.p.broken", "status": "error", "outcome": "failed",
         "name": "broken", "message": PY_CAUSE}]}  # fmt: skip
    said = message_lines(PY_CAUSE)
    assert len(said) == ERROR_LINES, said
    assert said[:3] == [
        "Runtime Error in model broken (models/broken.py)",
        "  Python model failed:",
        "  Traceback (most recent call last):",
    ], said
    hidden = len([line for line in PY_CAUSE.splitlines() if line.strip()]) - ERROR_LINES + 1
    assert said[-2:] == [
        f"... {hidden} more lines",
        "  ValueError: invalid literal for int() with base 10: 'abc'",
    ], said
    plain = result_table(_result(PY_CAUSE))
    for shown in (plain, _rich(_result(PY_CAUSE)), tables.run_table(record)):
        assert "ValueError: invalid literal for int() with base 10: 'abc'" in shown, shown
        assert f"... {hidden} more lines" in shown, shown


def test_a_show_prints_its_rows_as_a_table():
    rows = [
        {"order_id": 1, "status": "returned", "amount": 10.0},
        {"order_id": 2, "status": None, "amount": 20.5},
    ]
    for shown in (result_table(_result("", rows)), _rich(_result("", rows))):
        lines = shown.splitlines()
        head = next(i for i, line in enumerate(lines) if line.startswith("order_id"))
        assert lines[head].split() == ["order_id", "status", "amount"], shown
        assert lines[head + 1].split() == ["1", "returned", "10.0"], shown
        assert lines[head + 2].split() == ["2", "NULL", "20.5"], shown


def test_the_live_line_counts_the_running_node_in_its_total():
    tally = Tally()  # a selection: no planned count
    for i in range(2):
        node = ev.NodeResult(unique_id=f"model.p.m{i}", status="success", outcome="passed")
        tally.apply(ev.NodeFinished(project="p", run_id="r1", attempt=1, node=node))
    tally.apply(ev.NodeStarted(project="p", run_id="r1", attempt=1, unique_id="model.p.m2"))
    console = Console(width=100, record=True, force_terminal=True, color_system="standard")
    console.print(LiveArea(tally))
    top = console.export_text().splitlines()[0]
    assert "2/3 finished, 2 passed, 1 running" in top, top


def test_an_age_reads_in_its_largest_whole_unit():
    year, day = 365 * 86400, 86400
    shown = [age(s) for s in (272947532, 8 * year + 5 * day, 3 * day + 7, 7200, 300, 12.7, -1)]
    assert shown == ["8y", "8y", "3d", "2h", "5m", "12s", "0s"]


def test_a_count_says_its_noun_in_the_singular_only_for_one():
    assert [counted(n, "relation") for n in (0, 1, 2)] == [
        "0 relations",
        "1 relation",
        "2 relations",
    ]
    assert counted(1, "analysis") == "1 analysis"
    assert counted(3, "analysis") == "3 analyses" and counted(2, "saved query") == "2 saved queries"
    one = ev.NodeResult(
        unique_id="model.p.m", status="success", outcome="passed", name="m", rows_affected=1
    )
    assert node_line(one, 100).plain.rstrip().endswith(" 1 row"), node_line(one, 100).plain
    assert graph_lines([{"unique_id": "model.p.m", "resource_type": "model", "name": "m"}], []) == [
        "  1 node: 1 model",
        "  roots (1):  m",
        "  leaves (1): m",
    ]


def test_a_parse_sums_up_its_graph_and_dbt_s_warnings():
    from jetdbt.services.cli.graph_summary import warning_lines

    nodes = [
        {"unique_id": "seed.p.raw", "resource_type": "seed", "name": "raw"},
        {"unique_id": "model.p.stg", "resource_type": "model", "name": "stg"},
        {"unique_id": "model.p.mart", "resource_type": "model", "name": "mart"},
        {"unique_id": "test.p.t", "resource_type": "test", "name": "t"},
    ]
    edges = [
        {"parent": "seed.p.raw", "child": "model.p.stg"},
        {"parent": "model.p.stg", "child": "model.p.mart"},
        {"parent": "model.p.mart", "child": "test.p.t"},
    ]
    assert graph_lines(nodes, edges) == [
        "  4 nodes: 2 models, 1 seed, 1 test",
        "  roots (1):  raw",
        "  leaves (1): mart",
    ]
    log = [
        "02:57:49  Running with dbt=1.11.16",
        "02:57:50  [\x1b[33mWARNING\x1b[0m][SomeDeprecation]: Deprecated",
        "functionality in models/bad.yml",
        "02:57:51  Performance info: target/perf_info.json",
    ]
    assert warning_lines(log) == [
        "  [WARNING][SomeDeprecation]: Deprecated",
        "  functionality in models/bad.yml",
    ]
    assert warning_lines(log[:1]) == ["  none"]


def test_a_cancelled_run_s_status_names_who_and_that_no_node_ran():
    cancelled = {
        "run_id": "r1",
        "project": "p",
        "status": "cancelled",
        "totals": {"passed": 0},
        "result": {"status": "cancelled", "error": "cancelled", "cancelled_by": "ana"},
        "nodes": [],
    }
    shown = tables.run_table(cancelled).splitlines()
    assert shown[0] == "run r1 of p: cancelled by ana", shown
    assert "(cancelled before any node ran)" in shown, shown
    assert "cancelled before" not in tables.run_table({**cancelled, "status": "queued"})


def test_a_refused_run_lists_why_it_was_refused_not_why_it_waited():
    run = {"run_id": "r1", "status": "refused", "queue_reason": "waiting for run 'r0'",
           "refused_reason": "the selection (select=nope) matches no nodes"}  # fmt: skip
    listed = tables.runs_table({"project": "p", "runs": [run]})
    assert "matches no nodes" in listed and "waiting for run" not in listed, listed


def test_a_traceback_s_exception_line_is_shown_whatever_follows_it():
    """dbt's trailer, or an exception over several lines, after the exception's own line:
    that line is kept, and what follows it is cut and counted."""
    frames = [f'  File "m.py", line {i}, in f{i}\n    step{i}()' for i in range(10)]
    for after in (["compiled code at target/run/m.py", *(f"line {c}" for c in "abcde")],
                  [f"detail {i}" for i in range(8)]):  # fmt: skip
        text = "\n".join(["Traceback (most recent call last):", *frames, "KeyError: 'col'", *after])
        said = message_lines(text)
        assert len(said) <= ERROR_LINES and "KeyError: 'col'" in said, said
        assert said[-1] == f"... {counted(len(after) - ERROR_LINES // 2 + 1, 'more line')}"
