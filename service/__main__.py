"""Command line: ``python -m service serve|simulate|reproduce|bench ...``."""

from service.cli import main

raise SystemExit(main())
