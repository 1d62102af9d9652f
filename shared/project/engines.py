"""The engines a project may run on: one list, light enough for the settings to check a
default against without importing the descriptor (and YAML) into every CLI command."""

from __future__ import annotations

__all__ = ["ENGINES"]

# The first is the default (JETDBT_DEFAULT_ENGINE unset): the installed dbt-core, run warm.
ENGINES = ("dbt-core-1x", "dbt-core-2x", "fusion")
