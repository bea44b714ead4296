"""``python -m explorer``: the command line ``pytree-explorer``."""

import sys

from .cli import main

sys.exit(main())
