"""The operators' command line, `streams`: a package of one module per command or group
over a shared base, composed in `app` (as Faust's cli/ is).

    base.py          settings, console, loading --types/--rules modules, exit codes, errors
    app.py           the Typer app: every group composed; `main` is the console script
    worker.py        streams worker
    tenants.py       streams tenant create | list | rotate-password | delete | service-acls
    schemas.py       streams schemas write | check | register
    sink.py          streams sink langfuse | duckdb | sync-configs
    rules.py         streams rules propose | resolve | install | archive | list
    deadletters.py   streams deadletters list | redrive
    report.py        streams report
    demo.py          streams demo
    keys.py          streams keys create | list | revoke
    serve.py         streams serve
    mcp.py           streams mcp
    configuration.py streams settings

Command modules import `base` only; `app` imports them. This module imports nothing, so
importing `streams.surfaces.cli.base` does not load every command.
"""

__all__: list[str] = []
