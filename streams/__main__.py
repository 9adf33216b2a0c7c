"""`python -m streams` runs the command line."""

from streams.surfaces.cli.app import main

main()
