"""One module per CLI subcommand; each defines ``add_parser(subparsers)``."""
