"""What the catalog projection's queries answer with: the API serves these Structs as they are."""

from __future__ import annotations

from datetime import datetime

from jetdbt.projections.answers import Answer
from jetdbt.shared.bus.events import CatalogColumn


class NodeCatalog(Answer):
    """A node's relation as the last `docs generate` that listed it found it in the warehouse:
    its columns in the warehouse's order, when the catalog was generated and by which run."""

    columns: list[CatalogColumn]
    generated_at: datetime
    run_id: str
