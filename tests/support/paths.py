"""Where the repository's files are, for tests in any folder: one home, so a test that moves
does not change what it reads."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DEPLOY", "EXAMPLE", "GOLDEN", "RECORDED", "ROOT", "TESTS"]

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
EXAMPLE = ROOT / "examples" / "jaffle_shop"
DEPLOY = ROOT / "deploy"
GOLDEN = TESTS / "golden"
RECORDED = TESTS / "recorded"
