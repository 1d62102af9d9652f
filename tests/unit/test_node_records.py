"""What a run records of each node from dbt's run_results.json beyond its outcome: the SQL
dbt compiled for it (bounded) and the thread that ran it. The dbt end to end of both is
tests/with_dbt/test_viewer_daily.py; here, the bounds and the shapes dbt writes."""

from __future__ import annotations

from jetdbt.services.runner.after.results import COMPILED_LIMIT, from_artifacts, node_finished


def _results(**fields) -> dict:
    return {"results": [{"unique_id": "model.p.m", "status": "success", **fields}]}


def test_compiled_sql_and_thread_come_from_run_results():
    (node,) = from_artifacts(
        _results(compiled_code="select 1", thread_id="Thread-3 (worker)"), None
    )
    assert (node.compiled_code, node.thread) == ("select 1", "Thread-3 (worker)")


def test_a_node_dbt_compiled_nothing_for_records_none():
    """A seed has compiled_code null; a result from before v5 an empty string."""
    for value in (None, ""):
        (node,) = from_artifacts(_results(compiled_code=value, thread_id=""), None)
        assert node.compiled_code is None and node.thread is None


def test_compiled_sql_is_cut_to_its_limit_keeping_head_and_tail():
    sql = "select\n" + "  x,\n" * COMPILED_LIMIT + "from t -- end"
    (node,) = from_artifacts(_results(compiled_code=sql), None)
    assert len(node.compiled_code) < COMPILED_LIMIT + 100 and "characters cut" in node.compiled_code
    assert node.compiled_code.startswith("select") and node.compiled_code.endswith("-- end")


def test_the_live_finish_names_its_thread():
    record = {
        "info": {"name": "NodeFinished"},
        "data": {
            "node_info": {"unique_id": "model.p.m", "node_status": "success"},
            "run_result": {"status": "success", "thread": "Thread-2"},
        },
    }
    assert node_finished(record).thread == "Thread-2"
