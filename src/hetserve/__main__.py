"""``python -m hetserve``: the command line."""

import sys

from hetserve.cli import main

if __name__ == "__main__":  # the studies' worker processes import this module again
    sys.exit(main())
