"""``python -m runners.training.runner [options]``: one rank of a training run under torchrun."""

import sys

from .entry import main

sys.exit(main())
