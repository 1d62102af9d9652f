"""What masking costs per log line: every line a runner publishes or logs passes the masker.

Times `Masker.mask` on dbt-like log lines (about 150 characters, none holding a secret, the
common case), a run's log line as the bus publishes it (`mask_line`, with the line before
it), lines that do hold a secret spaced by dashes, and a
run-result-sized JSON event (about 4 KB), for a runner that resolved SECRETS values, and
prints microseconds per call (best of ROUNDS).

    .venv/bin/python bench/bench_masking.py [SECRETS]   (default 3)
"""

from __future__ import annotations

import secrets
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jetdbt.services.runner.setup.masking import Masker  # noqa: E402

ROUNDS = 5
LINES = [
    f"{i:02d}:12:0{i % 10}  {i} of 40 OK created sql table model analytics.stg_orders_{i}"
    f" ........ [OK in 0.{i:02d}s] Concurrency: 4 threads (target='prod') select * from x"
    for i in range(200)
]
EVENT = ('{"nodes":[' + ",".join(
    f'{{"unique_id":"model.shop.m{i}","status":"success","message":"OK","ms":{i}}}'
    for i in range(60)
) + "]}")  # fmt: skip


def _per_call(masker: Masker, texts: list[str]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for text in texts:
            masker.mask(text)
        best = min(best, (time.perf_counter() - start) / len(texts))
    return best * 1e6


def _published(masker: Masker) -> float:
    """A run's log line: masked with the line before it."""
    best = float("inf")
    for _ in range(ROUNDS):
        start, previous = time.perf_counter(), ""
        for line in LINES:
            masker.mask_line(line, previous)
            previous = line
        best = min(best, (time.perf_counter() - start) / len(LINES))
    return best * 1e6


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    masker, values = Masker(), [secrets.token_urlsafe(24) for _ in range(count)]
    for value in values:
        masker.add(value)
    leaking = [f"{line} {'-'.join(values[0])}" for line in LINES[:20]]
    width = sum(len(t) for t in LINES) // len(LINES)
    print(f"{count} secrets, per {width}-character line: {_per_call(masker, LINES):.1f} µs"
          f" masked, {_published(masker):.1f} µs published in a run's log,"
          f" {_per_call(masker, leaking):.1f} µs holding a spaced secret;"
          f" {_per_call(masker, [EVENT] * 20):.1f} µs per {len(EVENT)}-byte event")  # fmt: skip


if __name__ == "__main__":
    main()
