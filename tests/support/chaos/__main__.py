"""`python -m tests.support.chaos [--quick] [--keep]`: every experiment, then one table.

Exits 1 when any column that must be zero is not (everything but started, passed and
seconds). Logs of the in-process services go to chaos.log in the suite's folder.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jetdbt.shared.process import logging as jlog

from tests.support.chaos.suite import FULL, render, run_suite


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.chaos", description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="each experiment once (what the test suite runs)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the folder with servers' data")
    parser.add_argument(
        "--only", metavar="NAME,...", help=f"some experiments: {', '.join(FULL)}", default=""
    )
    args = parser.parse_args()
    only = {name for name in args.only.split(",") if name}
    if only - set(FULL):
        parser.error(f"unknown experiments {', '.join(sorted(only - set(FULL)))}")
    root = Path(tempfile.mkdtemp(prefix="jetdbt-chaos-"))
    log = open(root / "chaos.log", "a")  # noqa: SIM115 - open for the whole run
    jlog.configure("warning", stream=log)
    began = time.monotonic()
    try:
        tallies = asyncio.run(run_suite(root, quick=args.quick, only=only))
    finally:
        log.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(render(tallies))
    print(f"{time.monotonic() - began:.0f}s" + (f"; kept {root}" if args.keep else ""))
    return int(any(t.violations() for t in tallies))


if __name__ == "__main__":
    sys.exit(main())
