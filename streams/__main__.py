"""`python -m streams` runs the command line."""

from streams.surfaces.cli import main

main()
