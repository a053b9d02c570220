"""``python -m conduit.daemon.cli ARGS``: the full CLI without the console script's fast path."""

import sys

from conduit.daemon.cli.main import main

sys.exit(main())
