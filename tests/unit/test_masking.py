"""The masker's spellings: what it costs nothing to look for is never let through."""

from __future__ import annotations

import base64
import json
import urllib.parse

import pytest
from jetdbt.services.runner.setup.masking import MASK, Masker

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


def test_a_short_value_is_masked_only_as_written():
    """A port resolved from a reference: spaced, its digits would be in every timestamp."""
    masker = Masker()
    masker.add("5432")
    assert masker.mask("05:43:21 connect localhost:5432") == "05:43:21 connect localhost:****"


def test_a_url_never_carries_its_user_info_even_one_never_resolved():
    """An index or mirror URL an operator set with credentials, echoed by uv or dbt into a
    refusal: its user info is masked, the rest of the URL stays readable."""
    said = b'{"reason":"GET https://ci:t0ken-9@index.example/simple/x failed; see git+ssh://deploy@h/r"}'
    out = Masker().mask_bytes(said)
    assert b"t0ken-9" not in out and b"deploy@" not in out
    assert b"https://***@index.example/simple/x" in out and json.loads(out)


@pytest.mark.parametrize(
    "said",
    [
        "-".join(SECRET),  # the attack's spelling: r-t-c-a-…
        " ".join(SECRET),
        "\n".join(SECRET),
        f"select '{SECRET[:9]}' || '{SECRET[9:]}'",
        f'"{SECRET[:9]}" "{SECRET[9:]}"',
        f"'{SECRET[:12]}' +\n    '{SECRET[12:]}'",
        "\n".join(
            base64.b64encode(f"x{SECRET}".encode()).decode()[i : i + 8] for i in range(0, 36, 8)
        ),
    ],
    ids=[
        "dashes",
        "spaces",
        "lines",
        "sql concat",
        "adjacent strings",
        "across a line",
        "wrapped base64",
    ],
)
def test_spaced_and_split_spellings_are_masked_in_text_and_in_json(said):
    """Found with separators or joints between its letters, in a line and in an event,
    whose JSON stays JSON."""
    masker = Masker()
    masker.add(SECRET)
    out = masker.mask(f"Conversion Error: {said}!")
    assert out.startswith("Conversion Error: ") and out.endswith("!") and MASK in out, out
    event = masker.mask_bytes(json.dumps({"message": said, "n": 1}).encode())
    decoded = json.loads(event)
    assert decoded["n"] == 1 and MASK in decoded["message"], decoded
    assert "pA55" not in out and "pA55" not in decoded["message"]


def test_bytes_that_are_not_text_are_masked_only_as_written():
    """An archive (not UTF-8) is not searched for spaced letters, which its bytes would
    spell by chance; the secret as written is still masked there."""
    masker = Masker()
    masker.add(SECRET)
    spaced = b"\xff\x00" + "\x01".join(SECRET).encode() + b"\xfe"
    assert masker.mask_bytes(spaced) == spaced
    assert SECRET.encode() not in masker.mask_bytes(b"\xff" + SECRET.encode())


def test_a_log_line_is_masked_in_values_that_are_not_strings():
    """The runner's own log: a secret inside a list or a mapping it logs is masked too."""
    import io

    from jetdbt.shared.process import logging as jlog

    masker, out = Masker(), io.StringIO()
    masker.add(SECRET)
    jlog.add_mask(masker.mask)
    jlog.configure("info", stream=out)
    try:
        jlog.get("t").info("seen", plain=SECRET, nested={"args": ["-".join(SECRET)]})
    finally:
        jlog.configure("warning")
        jlog._masks.remove(masker.mask)
    line = json.loads(out.getvalue())
    assert line["plain"] == MASK and line["nested"] == {"args": [MASK]}, line


def test_a_spelling_wrapped_onto_the_next_log_line_is_masked_there():
    """Postgres wraps base64 at 76 characters, and dbt prints each line apart: the line
    that ends the spelling is masked from its start, so the two joined do not give it back."""
    masker = Masker()
    masker.add(SECRET)
    wrapped = base64.encodebytes(f"a longer value, so that its base64 wraps: {SECRET}".encode())
    first, second = wrapped.decode().split()
    assert masker.mask(first) == first and masker.mask(second) == second  # apart: pieces
    masked = masker.mask_line(second, first)
    assert masked.startswith(MASK) and second[:8] not in masked, masked
    assert masker.mask_line("no secret here", first) == "no secret here"


def test_an_event_is_masked_string_by_string_keeping_its_shape():
    """Letters of a secret in a value's end and the next key are no spelling: found across
    the JSON, the key would be masked and the event lose a field (found by the property)."""
    masker = Masker()
    masker.add("abc123xyz")
    said = {"message": "ends abc123", "xyz": 1, "other": "a-b-c-1-2-3-x-y-z"}
    out = json.loads(masker.mask_bytes(json.dumps(said).encode()))
    assert out == {"message": "ends abc123", "xyz": 1, "other": MASK}, out


def test_a_short_secret_with_a_slash_leaves_an_events_keys_and_words_alone():
    """A password of `$env:HOME` (`/root`): its URL-safe base64 is looked for, never the
    secret itself with `/` read as `_`, which turned the key `resolved_root` into
    `resolved****` and dead-lettered the event (a field gone)."""
    masker = Masker()
    masker.add("/root")
    event = {"resolved_root": "snow", "relation_root": "dbt://snow", "said": "home is /root"}
    masked = json.loads(masker.mask_bytes(json.dumps(event).encode()))
    assert masked == {**event, "said": f"home is {MASK}"}
    urlsafe = base64.urlsafe_b64encode(b"x/root").decode()
    assert urlsafe not in masker.mask(f"encoded: {urlsafe}")
