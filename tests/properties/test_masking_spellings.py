"""No spelling of a secret survives the masker, in plain text or inside a JSON string.

Hypothesis makes a secret (letters and digits with some punctuation), spells it one way
(as is, reversed, upper- or lower-cased; as hex, URL-encoded, base64 of it inside a longer
value at any alignment, standard or URL-safe, padded or not), lays it out (whole, spaced
by one separator, or split into pieces joined by quotes, `+`, `||`, commas or line breaks)
and puts it between two texts. Masked as a line and as a JSON event, the output still
decodes, and no part of it between two masks gives the secret back: not by its letters
and digits read in order or reversed (case aside), nor as hex, base64 or URL-decoded.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from jetdbt.services.runner.setup.masking import MASK, MAX_GAP, Masker

from tests.support.fuzzing import FUZZ

# No `*` anywhere but in masks: the output is read in the pieces between them.
PUNCT = "-_.+/=~!@#%$&:;,"
# At least MIN_SPACED letters and digits: a shorter value is masked only as written.
SECRETS = st.from_regex(rf"\A(?:[A-Za-z0-9]{{2,4}}[{re.escape(PUNCT)}]?){{3,10}}\Z")
SURROUNDING = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="*"))
SEPARATORS = st.characters(
    blacklist_categories=("Lu", "Ll", "Lt", "Lm", "Lo", "Nd", "Nl", "No", "Cs"),
    blacklist_characters="*",
)
# Two joints around a secret's own punctuation stay within MAX_GAP of each other's letters.
JOINTS = st.text(" \t\n'\"`+|,()", min_size=1, max_size=(MAX_GAP - 1) // 2)


@st.composite
def spelled(draw, secret: str) -> str:
    kind = draw(st.sampled_from(["as is", "reversed", "upper", "lower", "hex", "HEX",
                                 "url", "url+", "base64"]))  # fmt: skip
    if kind == "base64":
        before = draw(st.binary(max_size=5))
        after = draw(st.binary(max_size=5))
        encode = draw(st.sampled_from([base64.b64encode, base64.urlsafe_b64encode]))
        text = encode(before + secret.encode() + after).decode()
        return text.rstrip("=") if draw(st.booleans()) else text
    text = {
        "as is": secret, "reversed": secret[::-1], "upper": secret.upper(),
        "lower": secret.lower(), "hex": secret.encode().hex(),
        "HEX": secret.encode().hex().upper(), "url": urllib.parse.quote(secret, safe=""),
        "url+": urllib.parse.quote_plus(secret),
    }[kind]  # fmt: skip
    layout = draw(st.sampled_from(["whole", "spaced", "split"]))
    if layout == "spaced" and kind not in ("url", "url+"):
        return draw(SEPARATORS).join(text)
    if layout == "split":
        cuts = sorted(draw(st.sets(st.integers(1, len(text) - 1), min_size=1, max_size=3)))
        pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        return "".join(p + draw(JOINTS) for p in pieces[:-1]) + pieces[-1]
    return text


def _letters(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _recovered(secret: str, piece: str) -> str | None:
    """How `piece` gives `secret` back, or None."""
    letters, wanted = _letters(piece), _letters(secret)
    if wanted in letters or wanted[::-1] in letters:
        return "letters"
    if secret.encode().hex() in letters:
        return "hex"
    if secret in urllib.parse.unquote_plus(piece) or secret in urllib.parse.unquote(piece):
        return "url"
    b64 = re.sub(r"[^A-Za-z0-9+/]", "", piece.replace("-", "+").replace("_", "/"))
    for start in range(4):
        run = b64[start:]
        try:
            decoded = base64.b64decode(run[: len(run) // 4 * 4])
        except binascii.Error:
            continue
        if secret.encode() in decoded:
            return "base64"
    return None


def _left(secret: str, masked: str) -> list[tuple[str, str]]:
    return [(how, p) for p in masked.split("*") if (how := _recovered(secret, p))]


@FUZZ
@given(st.data(), SECRETS, SURROUNDING, SURROUNDING)
def test_no_spelling_of_a_secret_survives_masking(data, secret, before, after):
    masker = Masker()
    masker.add(secret)
    spelling = data.draw(spelled(secret), label="spelling")
    text = before + spelling + after
    masked = masker.mask(text)
    assert MASK in masked and not _left(secret, masked), (masked, _left(secret, masked))
    event = masker.mask_bytes(msgspec.json.encode({"message": text, "n": 1}))
    decoded = msgspec.json.decode(event)  # still JSON, still the same fields
    assert decoded["n"] == 1 and not _left(secret, decoded["message"]), decoded
