"""Provisioning: the engine environment (dbt-core and adapter) and the dbt packages a project
needs, resolved once and pinned by their lock. Nothing here starts a run."""
