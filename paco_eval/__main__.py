"""``python -m paco_eval BENCHMARK STAGE``: the same as the ``paco-eval`` console script."""

import sys

from paco_eval.cli import main

sys.exit(main())
