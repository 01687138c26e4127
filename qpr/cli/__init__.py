"""The command line: ``qpr`` (``python -m qpr``)."""
