"""The lab's subcommands of ``clickboost``: each module has ``add(subparsers)``, named by an entry point."""
