"""A `relation.written` fact as an external producer publishes it on the NATS door."""

from __future__ import annotations

import json
from datetime import UTC, datetime


def relation_written(relation: str, producer: str, **extra) -> bytes:
    body = {
        "type": "relation.materialized.v1",
        "at": datetime.now(UTC).isoformat(),
        "relation": relation,
        "producer": producer,
        "status": "success",
        "row_count": 1,
        **extra,
    }
    return json.dumps(body).encode()
