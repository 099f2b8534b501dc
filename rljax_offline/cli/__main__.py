"""`python -m rljax_offline.cli`: the same as the `rljax-offline` command."""

import sys

from rljax_offline.cli import main

sys.exit(main())
