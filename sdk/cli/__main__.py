"""``python -m sdk.cli``: the same as the ``funcsion`` console script."""

import sys

from . import main

sys.exit(main())
