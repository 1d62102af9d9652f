"""Subject patterns and the key a subject is filed under: built and read in
shared/bus/subjects.py."""

from __future__ import annotations

from jetdbt.shared.bus import subjects
from jetdbt.shared.bus.subjects import SubjectFilter


def test_patterns_cover_exactly_their_subjects():
    odd = "Team Ana/Ops"  # any user string: it is encoded, never spliced raw
    run = SubjectFilter([subjects.run_pattern("p", odd)])
    assert run(subjects.run_event("p", odd, "finished"))
    assert run(subjects.node_event("p", odd, "started"))
    assert not run(subjects.run_event("q", odd, "finished"))
    assert SubjectFilter([subjects.run_pattern(None, "r1")])(subjects.run_event("q", "r1", "x"))
    assert SubjectFilter([subjects.deploy_pattern("p")])(subjects.deploy_event("p", "deployed"))
    assert SubjectFilter([subjects.state_pattern("p")])(subjects.state_event("p", odd, "published"))
    assert SubjectFilter([subjects.project_pattern("p")])(subjects.graph_event("p", "run", "r"))
    assert subjects.project_pattern(None) == "dbt.evt.>"


def test_the_key_of_a_subject_is_its_project_or_relation_decoded():
    relation = "dbt://main/db.schema.Orders"
    assert subjects.subject_key(subjects.relation_event(relation, "materialized")) == relation
    assert subjects.subject_key(subjects.run_event("p", "r1", "started")) == "p"
    assert subjects.subject_key(subjects.command("run", "p", "ann")) == "p"
    assert subjects.subject_key("dbt.cmd.run._!!") == "_!!"  # not token(): as written
    assert subjects.subject_key("dbt.cmd.run") == ""
