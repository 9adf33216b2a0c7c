"""`python -m streams` runs the command line."""

from streams.cli import main

main()
