"""``python -m shelldon`` is the ``shelldon`` command."""

import sys

from shelldon.cli import main

sys.exit(main())
