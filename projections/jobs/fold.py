"""Jobs fold: every saved job of a project, and each job's schedule with its fires.

A job's row is its last JobSaved, removed by a JobDeleted further along the stream. A
schedule's row is its last ScheduleSaved; each ScheduleFired, and each ScheduleCoalesced (a
fire that joined its previous fire's run, counted in `coalesced` too), counts once as a fire
(its own stream sequence is past the row's) and says when the server fires it next.
"""

from __future__ import annotations

from jetdbt.shared.bus import events as ev

__all__ = ["JobsFold"]


class JobsFold:
    name = "jobs"

    async def apply(self, conn, event: ev.Event, seq: int) -> None:
        if isinstance(event, ev.JobSaved):
            await conn.execute(
                "INSERT INTO jobs (project, name, spec, saved_by, saved_at, stream_seq)"
                " VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT (project, name) DO UPDATE"
                " SET spec = EXCLUDED.spec, saved_by = EXCLUDED.saved_by,"
                " saved_at = EXCLUDED.saved_at, stream_seq = EXCLUDED.stream_seq"
                " WHERE jobs.stream_seq < EXCLUDED.stream_seq",
                event.project,
                event.name,
                event.spec,
                event.saved_by,
                event.at,
                seq,
            )
        elif isinstance(event, ev.JobDeleted):
            await conn.execute(
                "DELETE FROM jobs WHERE project = $1 AND name = $2 AND stream_seq < $3",
                event.project,
                event.name,
                seq,
            )
        elif isinstance(event, ev.ScheduleSaved):
            await conn.execute(
                "INSERT INTO job_schedules (project, job, state, cron, tz, principal, saved_at,"
                " stream_seq) VALUES ($1,$2,$3,$4,$5,$6,$7,$8) ON CONFLICT (project, job)"
                " DO UPDATE SET state = EXCLUDED.state, cron = EXCLUDED.cron, tz = EXCLUDED.tz,"
                " principal = EXCLUDED.principal, saved_at = EXCLUDED.saved_at,"
                " next_at = CASE WHEN EXCLUDED.state = 'active' THEN job_schedules.next_at END,"
                " stream_seq = EXCLUDED.stream_seq WHERE job_schedules.stream_seq < $8",
                event.project,
                event.job,
                event.state,
                event.cron,
                event.tz,
                event.principal,
                event.at,
                seq,
            )
        elif isinstance(event, ev.ScheduleCoalesced):
            await conn.execute(
                "UPDATE job_schedules SET fires = fires + 1, coalesced = coalesced + 1,"
                " last_fired_at = $3,"
                " next_at = CASE WHEN state = 'active' THEN $4::timestamptz END,"
                " stream_seq = $5 WHERE project = $1 AND job = $2 AND stream_seq < $5",
                event.project,
                event.job,
                event.fired_at,
                event.next_at,
                seq,
            )
        elif isinstance(event, ev.ScheduleFired):
            await conn.execute(
                "UPDATE job_schedules SET fires = fires + 1, last_fired_at = $3,"
                " last_run_id = $4, next_at = CASE WHEN state = 'active' THEN $5::timestamptz END,"
                " stream_seq = $6 WHERE project = $1 AND job = $2 AND stream_seq < $6",
                event.project,
                event.job,
                event.fired_at,
                event.run_id,
                event.next_at,
                seq,
            )
