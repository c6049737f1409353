"""``python -m fastmode``: the ``fastmode`` command."""

import sys

from fastmode.cli import main

sys.exit(main())
