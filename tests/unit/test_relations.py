"""The one relation-key canonicaliser: every spelling of one table is one key."""

from __future__ import annotations

import pytest
from jetdbt.shared.bus import subjects
from jetdbt.shared.runs.relations import InvalidRelation, normalise, parse, relation_key

# (warehouse, database, schema, name, default_database) -> key
KEYS = [
    (("main", "main", "main", "orders", "main"), "dbt://main/main/orders"),
    (("main", '"main"', '"Analytics"', '"Orders"', "main"), "dbt://main/analytics/orders"),
    (("main", "MAIN", "ANALYTICS", "ORDERS", "main"), "dbt://main/analytics/orders"),
    (("main", "main", "`analytics`", "`orders`", "main"), "dbt://main/analytics/orders"),
    (("main", "main", "[analytics]", "[Orders]", "main"), "dbt://main/analytics/orders"),
    # The warehouse is a configured name: kept exactly, case included.
    (("Prod", "main", "analytics", "orders", "main"), "dbt://Prod/analytics/orders"),
    # A relation outside the target's default database qualifies its schema...
    (("main", "RAW_DB", "events", "clicks", "main"), "dbt://main/raw_db.events/clicks"),
    (("main", '"Raw_Db"', '"Events"', "clicks", "MAIN"), "dbt://main/raw_db.events/clicks"),
    # ...and when the target leaves its database implicit, every relation does.
    (("main", "main", "analytics", "orders", None), "dbt://main/main.analytics/orders"),
    (("main", None, "analytics", "orders", None), "dbt://main/analytics/orders"),
    # Only ASCII is folded: DuckDB's case-insensitive comparison is ASCII-only too.
    (("main", "main", "Straße", "ÄNDERUNG", "main"), "dbt://main/straße/Änderung"),
]


@pytest.mark.parametrize(("args", "key"), KEYS)
def test_relation_key(args, key):
    assert relation_key(*args) == key


# Hand-written keys (annotations, declared writes) -> the canonical key
SPELLINGS = [
    ("dbt://main/analytics/orders", "dbt://main/analytics/orders"),
    ('dbt://main/"Analytics"/"Orders"', "dbt://main/analytics/orders"),
    ("dbt://main/ANALYTICS/Orders", "dbt://main/analytics/orders"),
    ("dbt://main/`analytics`/[orders]", "dbt://main/analytics/orders"),
    ('dbt://main/"Raw_DB"."Events"/clicks', "dbt://main/raw_db.events/clicks"),
    ("dbt://Prod/a/b", "dbt://Prod/a/b"),
]


@pytest.mark.parametrize(("written", "key"), SPELLINGS)
def test_normalise(written, key):
    assert normalise(written) == key
    assert normalise(key) == key  # idempotent


def test_variants_collapse_to_one_subject():
    """The subject of a declared write is derived from the canonical key by token()."""
    keys = {normalise(w) for w, _ in SPELLINGS[:4]}
    assert len(keys) == 1
    subject = subjects.relation_event(keys.pop(), "materialized")
    assert subject.startswith("dbt.evt.relation._") and subject.endswith(".materialized")
    assert subjects.untoken(subject.split(".")[3]) == "dbt://main/analytics/orders"


@pytest.mark.parametrize(
    "bad",
    [
        "main/analytics/orders",
        "dbt://main/orders",
        "dbt://main/a/b/c",
        "dbt:///analytics/orders",
        'dbt://main/""/orders',
        "dbt://main/analytics/",
        "dbt:// main/analytics/orders",
    ],
)
def test_refuses_what_names_no_relation(bad):
    with pytest.raises(InvalidRelation):
        parse(bad)
