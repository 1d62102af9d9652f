"""The fleet benchmark's arithmetic, apart from its servers: its size read from the
environment (checked before anything starts), and one runner count's figures from what
the pass saw (run events, checkpoint samples, answer times, peak memory)."""

from __future__ import annotations

import bisect
import math
import statistics
from typing import NamedTuple

from bench_schedules import _pct

__all__ = ["Sizes", "sizes", "Seen", "Figures", "figures", "lags", "RUNS_PER_DAY"]

RUNS_PER_DAY = 100_000
_NAMES = {
    "teams": ("JETDBT_FLEET_TEAMS", "20"),
    "projects": ("JETDBT_FLEET_PROJECTS", "100"),
    "runs": ("JETDBT_FLEET_RUNS", "1000"),
    "window": ("JETDBT_FLEET_WINDOW_SECONDS", "600"),
    "models": ("JETDBT_FLEET_MODELS", "10"),
    "slots_per_runner": ("JETDBT_FLEET_SLOTS_PER_RUNNER", "2"),
}


class Sizes(NamedTuple):
    teams: int
    projects: int
    runs: int
    window: int  # seconds over which the runs are submitted, evenly spaced
    models: int  # per generated project
    slots_per_runner: int  # MAX_CONCURRENT_RUNS is this times the runner count
    runners: tuple[int, ...]


def _count(env, name: str, default: str) -> int:
    raw = (env.get(name) or default).strip()
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise ValueError(f"{name}={raw!r}: give a whole number of at least 1")
    return int(raw)


def sizes(env) -> Sizes:
    """The size `env` asks for; ValueError naming the variable that is not a count."""
    found = {field: _count(env, name, default) for field, (name, default) in _NAMES.items()}
    listed = (env.get("JETDBT_FLEET_RUNNERS") or "1,2,4").split(",")
    runners = tuple(_count({"JETDBT_FLEET_RUNNERS": r}, "JETDBT_FLEET_RUNNERS", "") for r in listed)
    if found["projects"] < found["teams"]:
        raise ValueError(
            f"JETDBT_FLEET_PROJECTS={found['projects']} is fewer than JETDBT_FLEET_TEAMS="
            f"{found['teams']}: every team needs a project of its own"
        )
    return Sizes(**found, runners=runners)


class Seen(NamedTuple):
    """What one pass recorded, in seconds since the epoch unless said otherwise."""

    runners: int
    slots: int
    team_of: dict[str, str]  # run id -> team, every run submitted
    requested: dict[str, float]
    started: dict[str, float]
    ended: dict[str, tuple[float, str]]  # run id -> (time, status)
    lags: list[float]  # seconds from an event stored to its projection's checkpoint past it
    events: int  # run and node events stored during the pass
    answers: list[float]  # seconds of each GET /v1/runs/{id} answered 200
    other_answers: int  # answers that were not 200 (a run not projected yet: 404)
    peak_mb: dict[str, float]  # process (kind) -> peak resident set
    load: tuple[float, float]  # 1-minute load average at the pass's start and end


class Figures(NamedTuple):
    slots: int
    runs_per_min: float
    events_per_min: float  # run and node events, which the progress projection folds
    passed: int
    other_ends: int
    never_ended: int
    mean_run: float  # seconds from start to end
    busy: float  # of the slots' time, the share runs held them
    full_slots_per_min: float  # what the slots finish when always held, at this run length
    wait_p50: float
    wait_p99: float
    worst_team_p50: float
    worst_team_p99: float
    best_team_p50: float
    lag_p50: float
    lag_p99: float
    api_p50: float
    api_p99: float
    runners_for_a_day: int  # runners of this pass's share for RUNS_PER_DAY


def lags(events: list[tuple[int, float]], samples: list[tuple[float, int]]) -> list[float]:
    """Per event (stream sequence, stored at), the seconds until the first checkpoint sample
    (taken at, checkpoint) that covers it; events no sample covered are left out."""
    seqs = [seq for _, seq in samples]
    out = []
    for seq, stored in events:
        i = bisect.bisect_left(seqs, seq)
        if i < len(samples):
            out.append(max(0.0, samples[i][0] - stored))
    return out


def _pcts(values: list[float]) -> tuple[float, float]:
    return (_pct(values, 0.5), _pct(values, 0.99)) if values else (math.nan, math.nan)


def figures(seen: Seen) -> Figures:
    """One runner count's figures. Runs per minute count every run that ended, over the span
    from the first command to the last end; waits are command to start, of runs that
    started."""
    ends = [at for at, _ in seen.ended.values()]
    span = (max(ends) - min(seen.requested.values())) if ends and seen.requested else math.nan
    spans = [seen.ended[r][0] - at for r, at in seen.started.items() if r in seen.ended]
    mean_run = statistics.mean(spans) if spans else math.nan
    waits: dict[str, list[float]] = {}
    for run_id, at in seen.started.items():
        if run_id in seen.requested:
            waits.setdefault(seen.team_of[run_id], []).append(at - seen.requested[run_id])
    per_team = [_pcts(w) for w in waits.values()]
    wait_p50, wait_p99 = _pcts([w for team in waits.values() for w in team])
    lag_p50, lag_p99 = _pcts(seen.lags)
    api_p50, api_p99 = _pcts(seen.answers)
    full = seen.slots * 60 / mean_run if spans else math.nan
    per_runner = full / seen.runners
    passed = sum(1 for _, status in seen.ended.values() if status == "passed")
    return Figures(
        slots=seen.slots,
        runs_per_min=len(ends) / span * 60 if ends else 0.0,
        events_per_min=seen.events / span * 60 if ends else 0.0,
        passed=passed,
        other_ends=len(seen.ended) - passed,
        never_ended=sum(1 for r in seen.team_of if r not in seen.ended),
        mean_run=mean_run,
        busy=sum(spans) / (seen.slots * span) if spans else math.nan,
        full_slots_per_min=full,
        wait_p50=wait_p50,
        wait_p99=wait_p99,
        worst_team_p50=max((p50 for p50, _ in per_team), default=math.nan),
        worst_team_p99=max((p99 for _, p99 in per_team), default=math.nan),
        best_team_p50=min((p50 for p50, _ in per_team), default=math.nan),
        lag_p50=lag_p50,
        lag_p99=lag_p99,
        api_p50=api_p50,
        api_p99=api_p99,
        runners_for_a_day=math.ceil(RUNS_PER_DAY / 1440 / per_runner) if spans else 0,
    )
