"""The masker's spellings: what it costs nothing to look for is never let through."""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest

from services.runner.setup.secrets import MASK, Masker

SECRET = "pA55-w0rd/with+odd=chars"


def _masked(text: str) -> str:
    masker = Masker()
    masker.add(SECRET)
    return masker.mask(text)


@pytest.mark.parametrize(
    "spelling",
    [
        SECRET,
        SECRET[::-1],
        SECRET.upper(),
        json.dumps(SECRET)[1:-1],
        SECRET.encode().hex(),
        SECRET.encode().hex().upper(),
        urllib.parse.quote(SECRET, safe=""),
        urllib.parse.quote_plus(SECRET),
    ],
)
def test_each_spelling_is_masked(spelling):
    out = _masked(f"dbt said: {spelling}!")
    assert spelling not in out and MASK in out


@pytest.mark.parametrize("before", ["", "a", "ab", "abc", "user=admin;password="])
@pytest.mark.parametrize("encode", [base64.b64encode, base64.urlsafe_b64encode])
def test_base64_is_masked_wherever_the_secret_stands_in_what_was_encoded(before, encode):
    """A model that base64s `before + secret + after`: the characters only the secret
    determines are masked, at every alignment."""
    encoded = encode(f"{before}{SECRET};after".encode()).decode()
    out = _masked(f"log: {encoded}")
    assert MASK in out and encoded not in out


def test_short_values_are_not_worth_masking():
    masker = Masker()
    masker.add("abc")
    assert masker.mask("abc abc") == "abc abc"


def test_a_url_never_carries_its_user_info_even_one_never_resolved():
    """An index or mirror URL an operator set with credentials, echoed by uv or dbt into a
    refusal: its user info is masked, the rest of the URL stays readable."""
    said = b'{"reason":"GET https://ci:t0ken-9@index.example/simple/x failed; see git+ssh://deploy@h/r"}'
    out = Masker().mask_bytes(said)
    assert b"t0ken-9" not in out and b"deploy@" not in out
    assert b"https://***@index.example/simple/x" in out and json.loads(out)
