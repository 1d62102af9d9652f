"""Masking what a runner resolved: every secret, in every spelling it may leave in.

A spelling is found by its letters and digits, in order, in any case, with up to MAX_GAP
other characters between any two of them: punctuation, whitespace, quotes, `+`, `||`, and
JSON's escapes such as `\\n` or `\\u0022` (each one character). So one pattern per spelling
finds it plain, upper-cased, spaced by separators (`r-t-c-a`, `r t c a`, `r\\t\\c\\a`), and
split into pieces (`'rtc' || 'a42'`, `"rtc" "a42"`, `'rtc' +` and `'a42'` on the next
line), in plain text and inside a JSON string alike. The spellings: the secret as is and
reversed, its hex, its URL-encodings and its base64 (standard or URL-safe, padded or not,
at each of the three byte alignments it may have inside a longer encoded text). A defence
in depth only: the sandbox, not this list, keeps secrets from a project's code.
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse

import msgspec

__all__ = ["MASK", "MAX_GAP", "MIN_SECRET", "MIN_SPACED", "Masker"]

MASK = "****"
# Shorter values (a port, "true") are not worth masking and would garble lines.
MIN_SECRET = 4
# A spelling with fewer letters and digits is masked only as written: spaced, its digits
# would be found in every timestamp (a port's 5432 in 05:43:21).
MIN_SPACED = 6
# The most characters between two letters of a spelling (`' ||\n    '` is 10).
MAX_GAP = 24
# A URL's user info (`https://user:token@index/`): credentials whoever wrote them, known to
# this runner or not (an operator's index or mirror URL in a resolver's message).
_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@\"'\\]+@")
# One character between two letters: anything but a letter or digit, or a JSON escape
# (`\"`, `\n`, `\u0022`: one character too, so a gap counts alike in a JSON document and
# in the string it holds; a backslash alone is a gap as well, in plain text).
_GAP = r'(?:\\[\\"/bfnrt]|\\u[0-9A-Fa-f]{4}|(?!\\[\\"/])[\W_])'
_NOT_LETTERS = re.compile(r"[\W_]")
# JSON's escapes, read from the left as a JSON reader does (`\\n` is a backslash, an n).
_ESCAPES = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|[\\\"/bfnrt])")
_KEPT = re.compile(rf"(?P<letters>[^\W_]+)|(?:{_ESCAPES.pattern}|[\W_])+")
_URL_SAFE = str.maketrans("+/", "-_")
_NOT_ASCII_LETTERS = bytes(b for b in range(256) if not (b < 128 and chr(b).isalnum()))


def _base64_cores(data: bytes) -> set[str]:
    """What base64 writes for `data` wherever it stands in a longer text: for each of the
    three alignments, the characters that depend on `data` alone."""
    cores = set()
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + data).decode()
        start = -(-shift * 4 // 3)  # characters that still carry the padding bytes
        end = ((shift + len(data)) // 3) * 4
        cores.add(encoded[start:end])
    return cores


def _spellings(secret: str) -> set[str]:
    data = secret.encode()
    cores = _base64_cores(data)
    return {secret, secret[::-1], data.hex(), urllib.parse.quote(secret, safe=""),
            urllib.parse.quote_plus(secret), *cores,
            *(core.translate(_URL_SAFE) for core in cores)}  # fmt: skip


def _ascii_letters(text: str) -> str:
    """The ASCII letters and digits of `text`, lower-cased: what a spelling's own must stand
    in, in a row, for its pattern to be worth trying (a byte table is some twenty times
    faster than the pattern)."""
    data = text.encode("utf-8", "surrogateescape").translate(None, _NOT_ASCII_LETTERS)
    return data.lower().decode()


def _pattern(letters: str) -> re.Pattern:
    gap = f"{_GAP}{{0,{MAX_GAP}}}"
    return re.compile(gap.join(re.escape(c) for c in letters), re.IGNORECASE)


def _hidden(found: re.Match) -> str:
    """A found spelling masked. One holding a quote or a backslash keeps those (and every
    other character but its letters) where they stood, so a JSON document stays one; a
    first letter that a lone backslash escapes (`\\n`) is that escape's, and kept too."""
    text, at, string = found.group(), found.start(), found.string
    escaped = string[at - 1 : at] == "\\" and string[at - 2 : at - 1] != "\\"
    if not escaped and '"' not in text and "\\" not in text:
        return MASK
    kept = text[0] if escaped else ""
    return kept + _KEPT.sub(lambda m: MASK if m["letters"] else m.group(), text[len(kept) :])


class Masker:
    """Every secret this runner resolved, in every spelling (see the module). One instance
    per runner, applied where anything leaves it (events, log lines, blobs, logs).

    A spelling with fewer than MIN_SPACED letters and digits is masked only as written (and
    upper-cased), as is the JSON escape of a secret that is not ASCII; so is every spelling
    in bytes that are not UTF-8 text (a package archive), where letters spaced by other
    bytes would be found by chance."""

    def __init__(self):
        # Each secret: its spellings found by pattern (by their letters) and as written.
        self._known: dict[str, tuple[dict[str, tuple[str, re.Pattern]], set[str]]] = {}
        # Per spelling of every secret: its letters but the first (a quick test on a text's
        # letters, read plain and read as JSON: the first may be an escape's), its pattern.
        self._spaced: dict[str, tuple[str, re.Pattern]] = {}
        # Spellings as written, longest first: every one (for bytes that are not text), and
        # those no pattern finds (for text).
        self._exact: list[str] = []
        self._unspaced: list[str] = []

    def add(self, secret: str) -> None:
        if len(secret) < MIN_SECRET or secret in self._known:
            return
        spaced: dict[str, tuple[str, re.Pattern]] = {}
        exact = {secret, secret[::-1], secret.upper(), secret.lower()}
        exact |= {json.dumps(v)[1:-1] for v in exact}
        for spelling in _spellings(secret):
            letters = _NOT_LETTERS.sub("", spelling).lower()
            if len(letters) >= MIN_SPACED:
                spaced[letters] = self._spaced.get(letters) or (
                    _ascii_letters(letters[1:]),
                    _pattern(letters),
                )
            elif len(spelling) >= MIN_SECRET:
                exact |= {spelling, spelling.upper()}
        self._known[secret] = (spaced, exact)
        self._gather()

    def forget(self, secret: str) -> None:
        """Stop looking for a secret that is dead (a run's own credential, once dropped),
        so a long-lived runner's list does not grow with every run."""
        if self._known.pop(secret, None) is not None:
            self._gather()

    def _gather(self) -> None:
        spaced = {k: v for found, _ in self._known.values() for k, v in found.items()}
        self._spaced = dict(sorted(spaced.items(), key=lambda s: -len(s[0])))
        exact = {e for _, written in self._known.values() for e in written}
        self._exact = sorted(exact, key=len, reverse=True)
        self._unspaced = [s for s in self._exact if not self._finds(s)]

    def _finds(self, spelling: str) -> bool:
        spaced = self._spaced.get(_NOT_LETTERS.sub("", spelling).lower())
        return spaced is not None and spaced[1].fullmatch(spelling) is not None

    def mask(self, text: str) -> str:
        return self._mask(text, self._worth_trying(text), self._unspaced)

    def mask_line(self, line: str, previous: str) -> str:
        """`line` masked, and its start too when it ends a spelling that `previous` (the
        line before it in the same log, published already) began: a spelling wrapped onto
        a second line (base64 at 76 characters, a message broken in two) is not read back
        by joining the two."""
        if not previous:
            return self.mask(line)
        joined, cut = f"{previous}\n{line}", len(previous) + 1
        worth = self._worth_trying(joined)  # what `line` alone has is among these
        end = max(
            (
                m.end()
                for found in worth
                for m in found.finditer(joined)
                if m.start() < cut < m.end()
            ),
            default=cut,
        )
        return (MASK if end > cut else "") + self._mask(line[end - cut :], worth, self._unspaced)

    def _worth_trying(self, text: str) -> list[re.Pattern]:
        """The patterns of the spellings whose letters `text` has in a row."""
        if not self._spaced:
            return []
        plain = _ascii_letters(text)
        unescaped = _ascii_letters(_ESCAPES.sub("", text)) if "\\" in text else ""
        return [
            found for tail, found in self._spaced.values() if tail in plain or tail in unescaped
        ]

    def _mask(self, text: str, worth: list[re.Pattern], exact: list[str]) -> str:
        if "://" in text:
            text = _USERINFO.sub(r"\1***@", text)
        for found in worth:
            text = found.sub(_hidden, text)
        for spelling in exact:
            if spelling in text:
                text = text.replace(spelling, MASK)
        return text

    def mask_bytes(self, data: bytes) -> bytes:
        """`data` masked: a JSON document string by string (a spelling found across two of
        them, or reaching a key, would change the document's shape), other text as text,
        and bytes that are not text only where a spelling stands as written."""
        if not self._exact and b"://" not in data:
            return data
        try:
            text = data.decode()
        except UnicodeDecodeError:
            text = data.decode("utf-8", errors="surrogateescape")
            masked = self._mask(text, [], self._exact)
            return data if masked == text else masked.encode("utf-8", errors="surrogateescape")
        masked = self.mask(text)
        if masked == text:
            return data
        try:
            return msgspec.json.encode(self._in_strings(msgspec.json.decode(data)))
        except msgspec.DecodeError:
            return masked.encode()

    def _in_strings(self, value):
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, list):
            return [self._in_strings(v) for v in value]
        if isinstance(value, dict):
            return {self.mask(k): self._in_strings(v) for k, v in value.items()}
        return value
