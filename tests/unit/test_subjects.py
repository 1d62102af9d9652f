"""Subject patterns as NATS reads them, and the one filter that covers several."""

from __future__ import annotations

import pytest
from jetdbt.shared.bus.stream_batches import pending, stream_seq
from jetdbt.shared.bus.subjects import SubjectFilter, covering
from nats.aio.msg import Msg


@pytest.mark.parametrize(
    ("patterns", "cover"),
    [
        (["dbt.evt.run.>", "dbt.evt.node.>"], "dbt.evt.>"),
        (["dbt.evt.graph.>"], "dbt.evt.graph.>"),
        (["a.b", "a.b.c"], "a.>"),  # "a.b.>" would miss "a.b" itself
        (["a.*.c", "a.b.d"], "a.>"),  # a wildcard token is never part of the prefix
        (["a.>", "b.>"], ">"),
    ],
)
def test_covering_holds_every_pattern(patterns, cover):
    assert covering(patterns) == cover


@pytest.mark.parametrize(
    ("patterns", "subject", "wanted"),
    [
        (["dbt.evt.run.>", "dbt.evt.node.>"], "dbt.evt.run.p.r1.started", True),
        (["dbt.evt.run.>", "dbt.evt.node.>"], "dbt.evt.node.p.r1.finished", True),
        (["dbt.evt.run.>", "dbt.evt.node.>"], "dbt.evt.deploy.p.requested", False),
        (["dbt.evt.run.>"], "dbt.evt.run", False),  # '>' needs at least one token
        (["dbt.evt.run.>"], "dbt.evt.runner.x", False),
        (["dbt.evt.relation.*.materialized"], "dbt.evt.relation.k.materialized", True),
        (["dbt.evt.relation.*.materialized"], "dbt.evt.relation.k.x.materialized", False),
        (["a.*.>"], "a.b.c.d", True),
        ([">"], "anything.at.all", True),
    ],
)
def test_subject_filter_matches_as_nats_does(patterns, subject, wanted):
    assert SubjectFilter(patterns)(subject) is wanted


@pytest.mark.parametrize(
    "reply",
    [
        "$JS.ACK.DBT_EVENTS.proj-progress.1.4321.17.1732900000000000000.5",
        "$JS.ACK.hub.ACCHASH.DBT_EVENTS.proj-progress.1.4321.17.1732900000000000000.5.tok",
    ],
)
def test_stream_seq_and_pending_read_both_ack_subject_forms(reply):
    msg = Msg(_client=None, subject="dbt.evt.run.p.r.started", reply=reply)
    assert stream_seq(msg) == msg.metadata.sequence.stream == 4321
    assert pending(msg) == msg.metadata.num_pending == 5
