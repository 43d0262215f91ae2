"""`python -m capacity` (and `torchrun ... -m capacity profile ...`): the `capacity` command."""

from __future__ import annotations

import sys

from capacity.cli.app import main

sys.exit(main())
