"""The contract's replica rule (JETDBT_STREAM_REPLICAS, `jetdbt contract apply --replicas`):
every stream and bucket at the most of streams.yaml's count, the configured one and what the
server holds, never fewer; a server holding fewer than configured is named stream by stream."""

from __future__ import annotations

import pytest
from jetdbt.services.cli.parser import build_parser
from jetdbt.shared.bus.contract import fewer_replicas, replicas_wanted
from jetdbt.shared.process.config import load


@pytest.mark.parametrize(
    ("declared", "configured", "held", "wanted"),
    [
        (1, 1, None, 1),  # a new stream, one server
        (1, 3, None, 3),  # a new stream in a cluster
        (1, 3, 1, 3),  # an R1 stream raised
        (1, 1, 3, 3),  # an operator's R3 kept by a service configured for 1
        (1, 3, 5, 5),  # never shrunk
        (3, 1, None, 3),  # streams.yaml's own count is the least
    ],
)
def test_a_stream_gets_the_most_replicas_any_source_asks_for(declared, configured, held, wanted):
    assert replicas_wanted(declared, configured, held) == wanted


def test_the_streams_held_at_fewer_replicas_than_configured_are_named():
    held = {"DBT_EVENTS": 1, "DBT_LOGS": 3, "KV_DBT_LEASES": 2}
    assert fewer_replicas(held, 3) == {"DBT_EVENTS": 1, "KV_DBT_LEASES": 2}
    assert fewer_replicas(held, 1) == {}


def test_the_setting_and_the_flag_take_one_to_five():
    assert load({}).stream_replicas == 1
    assert load({"JETDBT_STREAM_REPLICAS": "3"}).stream_replicas == 3
    with pytest.raises(ValueError, match="JETDBT_STREAM_REPLICAS=0 must be at least 1"):
        load({"JETDBT_STREAM_REPLICAS": "0"})
    with pytest.raises(ValueError, match="=6 is more than the 5 replicas JetStream holds"):
        load({"JETDBT_STREAM_REPLICAS": "6"})
    for odd in ("1_0", "\u0663", "99999999999999999999", "3.0"):
        with pytest.raises(ValueError, match="is not a whole number"):
            load({"JETDBT_STREAM_REPLICAS": odd})
    parser = build_parser()
    assert parser.parse_args(["contract", "apply", "--replicas", "3"]).replicas == 3
    assert parser.parse_args(["contract", "apply"]).replicas is None  # the setting's, then
    with pytest.raises(SystemExit):
        parser.parse_args(["contract", "apply", "--replicas", "0"])
    with pytest.raises(SystemExit):
        parser.parse_args(["contract", "apply", "--replicas", "6"])
