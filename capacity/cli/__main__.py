"""`python -m capacity.cli`: the `capacity` command."""

from __future__ import annotations

from capacity.cli.app import main
from capacity.cli.runtime import exit_program

exit_program(main())
