"""``python -m framework``: the command line (see ``framework.orchestration.cli``)."""

import sys

from .orchestration.cli import main

sys.exit(main())
