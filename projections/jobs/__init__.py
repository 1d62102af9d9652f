"""The jobs projection: saved jobs and their schedules, and the reads of them."""
