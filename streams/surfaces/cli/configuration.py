"""`streams settings`: every setting's variable and its value here."""

from __future__ import annotations

from typing import Annotated

import typer

from streams.settings import markdown_table
from streams.surfaces.cli.base import settings

__all__ = ["show_settings"]


def show_settings(
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print the configuration table of docs/running.md instead.")]
    = False,
) -> None:
    """Print every setting's variable and its value here (secrets masked)."""
    if markdown:
        print(markdown_table(), end="")
        return
    for variable, value in settings().shown().items():
        print(f"{variable}={value}")
