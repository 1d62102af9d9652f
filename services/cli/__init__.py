"""The `jetdbt` command line: run the stack, deploy, run, and read status.

`up` runs every service in the foreground; `deploy` and `run` publish commands on
NATS like any other system would; `status` reads the query API. One module per
group of commands; `main` (the console script) is here.
"""

from jetdbt.services.cli.entry import main

__all__ = ["main"]
