"""Structured logs: one JSON object per line, with run id and project bound by callers."""

from __future__ import annotations

import logging
import sys

from jetdbt.shared.bus.outages import outage


def _structlog():
    """structlog, imported without rich: its default console renderer formats tracebacks
    with rich when it can import it, 0.14 s of every process's start (`jetdbt run`'s
    among them), and jetdbt's lines are JSON (configure). The CLI's display imports rich
    itself when it draws."""
    if "rich" in sys.modules:
        import structlog
    else:
        sys.modules["rich"] = None  # an import of it fails meanwhile
        try:
            import structlog
        finally:
            del sys.modules["rich"]
    return structlog


structlog = _structlog()

__all__ = ["configure", "get", "add_mask"]

_masks: list = []
# Libraries that log through the standard library: their lines join ours.
_LIBRARIES = ("asyncpg",)


def add_mask(mask) -> None:
    """Mask every string of every later log line with `mask` (a runner's secrets)."""
    if mask not in _masks:
        _masks.append(mask)


def _masked(logger, name, event: dict) -> dict:
    if not _masks:
        return event
    for key, value in event.items():
        if isinstance(value, str):
            for mask in _masks:
                value = mask(value)
            event[key] = value
    return event


def _masked_line(logger, name, line: str) -> str:
    """The rendered line masked again: what the renderer made of a value that was not a
    string (a list, a mapping, an object's repr) was not masked before."""
    for mask in _masks:
        line = mask(line)
    return line


class _Library(logging.Handler):
    """A library's log record (asyncpg's pool restoring its connections while Postgres
    restarts) as one of our lines: an outage's exception named in a line, no traceback; any
    other exception keeps its traceback, as a bug's does."""

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        cause = outage(exc) if exc is not None else None
        fields = {"cause": cause} if cause else {"exc_info": record.exc_info} if exc else {}
        log = get(record.name)
        getattr(log, record.levelname.lower(), log.warning)(record.getMessage(), **fields)


def configure(level: str = "info", stream=None) -> None:
    """Route structlog to one line of JSON per event on stderr (stdout is the CLI's), and
    the libraries' own log records with it."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            _masked,
            structlog.processors.JSONRenderer(),
            _masked_line,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    for name in _LIBRARIES:
        library = logging.getLogger(name)
        library.handlers[:] = [_Library()]
        library.propagate = False


def get(name: str, **bound):
    return structlog.get_logger(name).bind(**bound)
