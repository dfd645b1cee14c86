"""``python -m runners.constants [options]``: one rank of a constants measurement under torchrun."""

import sys

from .entry import main

sys.exit(main())
