"""``python -m hetserve``: the command line."""

import sys

from hetserve.cli import main

sys.exit(main())
