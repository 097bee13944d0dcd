"""The service's own subcommand of ``clickboost``: ``serve`` (the lab's plug in, see :mod:`service.cli`)."""
