"""The `streams` command: every command group composed into one Typer app.

This module imports the command modules (one per command or group: worker, tenant,
schemas, sink, rules, deadletters, report, demo, keys, serve, mcp, settings, index, views);
they import only `streams.surfaces.cli.base`, never this module, so the command line has no
import cycle.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from streams.core.errors import MissingExtra
from streams.surfaces.cli.base import fail
from streams.surfaces.cli.calibration import calibration_app
from streams.surfaces.cli.configuration import show_settings
from streams.surfaces.cli.deadletters import deadletters_app
from streams.surfaces.cli.demo import demo
from streams.surfaces.cli.index import index_app
from streams.surfaces.cli.keys import keys_app
from streams.surfaces.cli.mcp import mcp
from streams.surfaces.cli.queues import queues_app
from streams.surfaces.cli.registry import registry_proxy
from streams.surfaces.cli.report import report
from streams.surfaces.cli.rules import rules_app
from streams.surfaces.cli.schemas import schemas_app
from streams.surfaces.cli.serve import serve
from streams.surfaces.cli.sink import sink_app
from streams.surfaces.cli.tenants import tenant_app
from streams.surfaces.cli.views import views_app
from streams.surfaces.cli.worker import worker

__all__ = ["DISTRIBUTION", "app", "main", "package_version"]

DISTRIBUTION = "feedback-streams"
"""The installed distribution whose metadata `streams --version` reads."""

# Help as click's plain text, wrapped at word boundaries to the terminal (up to 120
# columns): rich's panels cut long words such as $STREAMS_FEEDBACK_MODULES at 80 columns and
# show `<bool>` beside flags; plain help shows flags as --x / --no-x.
_CONTEXT = {"help_option_names": ["--help", "-h"], "max_content_width": 120}

app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode=None,
                  context_settings=_CONTEXT,
                  help="feedback-streams: typed feedback on Kafka, mirrored as scores.")


def package_version() -> str:
    """The installed package's version (its metadata), or a note that it is not installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed: run `pip install .` in the checkout)"


def _show_version(value: bool) -> None:
    if value:
        print(f"streams (feedback-streams) {package_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[bool, typer.Option(
        "--version", callback=_show_version, is_eager=True,
        help="Print the installed version and exit.")] = False,
) -> None:
    """feedback-streams: typed feedback on Kafka, mirrored as scores."""


app.command()(worker)
app.add_typer(tenant_app, name="tenant")
app.add_typer(index_app, name="index")
app.add_typer(schemas_app, name="schemas")
app.add_typer(sink_app, name="sink")
app.add_typer(rules_app, name="rules")
app.add_typer(queues_app, name="queues")
app.add_typer(deadletters_app, name="deadletters")
app.command()(report)
app.command()(demo)
app.command("settings")(show_settings)
app.add_typer(keys_app, name="keys")
app.add_typer(views_app, name="views")
app.add_typer(calibration_app, name="calibration")
app.command("serve")(serve)
app.command("mcp")(mcp)
app.command("registry-proxy")(registry_proxy)


def main() -> None:
    """Entry point of the `streams` command."""
    try:
        app()
    except MissingExtra as exc:  # a command's optional libraries: one line, not a traceback
        raise SystemExit(fail(exc).exit_code) from exc


if __name__ == "__main__":
    main()
