"""Facts a runner records from commands other systems publish: saved jobs and their schedules,
the checks of their triggers, declared writes."""
