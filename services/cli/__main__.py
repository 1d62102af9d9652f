"""`python -m jetdbt.services.cli`: the same as the `jetdbt` console script."""

import sys

from jetdbt.services.cli import main

sys.exit(main())
