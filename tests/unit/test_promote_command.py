"""A promotion's version argument, attacked: too few hex digits, uppercase, too long, a
space, a bare prefix are each refused in words that say what a version looks like."""

from __future__ import annotations

import pytest
from jetdbt.shared.bus.commands import PromoteCommand


@pytest.mark.parametrize(
    "version",
    [
        "sha256:abcde",
        "sha256:" + "a" * 93,
        "ABCDEF012345",
        "sha256:",
        "0a9b8c7d6e5",
        "0a9b 8c7d6e5f",
    ],
)
def test_a_promotion_names_at_least_12_lowercase_hex_digits_of_a_version(version):
    with pytest.raises(ValueError, match="is not a version: give a version's digest"):
        PromoteCommand(version=version)
    for good in ("0a9b8c7d6e5f", "sha256:0a9b8c7d6e5f", "sha256:" + "0" * 64):
        assert PromoteCommand(version=good).version == good
