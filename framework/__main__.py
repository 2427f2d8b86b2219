"""``python -m framework``: the command line (see ``framework.cli``)."""
import sys

from .cli import main

sys.exit(main())
