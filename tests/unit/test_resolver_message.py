"""A failed install's message: the resolver's explanation from its first line, and one too
long for a refusal keeps its first line and its conclusion, saying what it left out."""

from __future__ import annotations

from jetdbt.services.runner.provision.environments import explanation

CAUSES = [
    f"         And because dbt-x=={n} depends on dbt-core=={n}, we conclude" for n in range(90)
]
STDERR = "\n".join(
    [
        "Using Python 3.11 environment at: /envs/x",
        "warning: an index answered slowly",
        "error: No solution found when resolving dependencies",
        "  cause: Because all of:",
        *CAUSES,
        "         And because you require dbt-x, your requirements are unsatisfiable.",
        "",
        "hint: Wheels are required for `x` because building from source is disabled",
    ]
)


def test_the_explanation_is_whole_from_its_error_line():
    said = explanation(STDERR)
    assert said.startswith("error: No solution found when resolving dependencies\n  cause:")
    assert all(cause in said for cause in CAUSES)
    assert said.endswith("building from source is disabled") and "warning:" not in said


def test_one_too_long_keeps_its_first_line_and_its_last_ones():
    said = explanation(STDERR, limit=1000)
    lines = said.splitlines()
    assert lines[0] == "error: No solution found when resolving dependencies"
    assert lines[-1].startswith("hint: Wheels are required") and CAUSES[-1] in lines
    assert CAUSES[0] not in lines and len(said) <= 1000
    explained = len(STDERR.splitlines()) - 2  # less the two lines before `error:`
    left_out = explained - (len(lines) - 1)  # less those kept (all but the marker)
    assert lines[1] == f"  …({left_out} lines left out)…"


def test_one_enormous_line_is_bounded():
    said = explanation("error: " + "x" * 50_000, limit=1000)
    assert said.startswith("error: xxx") and len(said) < 1100
