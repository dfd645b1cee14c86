"""``python -m runners.measure.sweep collectives [options]``, run by torchrun on every rank (see :mod:`.entry`)."""

import sys

from .entry import main

sys.exit(main())
