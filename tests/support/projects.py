"""Models tests add to a copy of the example project: one that waits on a gate, one that
fails once and then passes."""

from __future__ import annotations

import yaml

# A middle model the test breaks and mends by a file, since dbt retry restores the
# resumed run's vars: a var could not be flipped between the run and its retry.
GATED = """
import os


def model(dbt, session):
    dbt.config(materialized="table")
    if os.path.exists(dbt.config.get("break_file")):
        raise RuntimeError("the warehouse is down (test gate)")
    return dbt.ref("stg_payments")
"""


# Fails on its first execution only: a transient warehouse error. Its marker lies in the job
# folder (its path is relative to the project), the one place a sandboxed run may write
# that lasts from one retry round to the next.
FLAKY = """
import os


def model(dbt, session):
    dbt.config(materialized="table")
    marker = dbt.config.get("marker_file")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("transient: connection reset (test)")
    return dbt.ref("stg_orders")
"""


def add_model(project, name: str, code: str, config: dict) -> None:
    marts = project / "models" / "marts"
    (marts / f"{name}.py").write_text(code)
    (marts / f"{name}_after.sql").write_text(f"select * from {{{{ ref('{name}') }}}}\n")
    (marts / f"{name}.yml").write_text(
        yaml.safe_dump({"models": [{"name": name, "config": config}]})
    )
