"""Subcommands of the ``paco-reward`` command line."""
