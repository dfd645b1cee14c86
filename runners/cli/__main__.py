"""``python -m runners.cli``: the ``commscope`` command line."""

import sys

from .entry import main

sys.exit(main())
