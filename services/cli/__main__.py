"""`python -m services.cli`: the same as the `jetdbt` console script."""

import sys

from services.cli import main

sys.exit(main())
