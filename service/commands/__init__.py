"""Subcommands of ``python -m service``; each module registers itself with ``service.cli.commands``."""
