"""One module per CLI subcommand, each with ``add_parser(subparsers)`` and ``run(args) -> int``."""
