"""``python -m bench`` runs the CLI."""

import sys

from bench.cli import main

sys.exit(main())
