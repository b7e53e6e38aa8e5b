"""``python -m reconbench.claims``: write (or ``--check``) docs/claims.md."""

import sys

from reconbench.claims.page import main

sys.exit(main())
