"""The research commands of ``clickboost lab``: each module has ``add(subparsers)`` (an entry point)."""
