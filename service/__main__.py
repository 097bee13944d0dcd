"""Command line: ``python -m service serve|warm|export|evaluate|lab ...`` (service.cli)."""

from service.cli import main

raise SystemExit(main())
