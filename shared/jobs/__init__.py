"""Saved jobs and what they set off: which jobs have triggers, when a schedule fires, and the
webhooks runs are told to."""
