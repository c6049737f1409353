import sys

from fastmode.cli import main

sys.exit(main())
