"""What every process stands on: its settings, its structured logs, its supervised loops and the
servers it names by pid file."""
