"""Importing a user's modules (feedback types, rules) for any surface: the command line and
`streams serve` both load them, and both report a module that cannot be imported the same way.

A neutral module, so the HTTP surface does not import the command line's.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Iterable
from typing import Any

from streams.core.errors import StreamsError

__all__ = ["ModuleFailed", "import_user_module", "module_rules"]


class ModuleFailed(StreamsError):
    """A user's `--types` or `--rules` module cannot be used."""


def import_user_module(kind: str, name: str, option: str) -> Any:
    """Import a user's `kind` ("feedback", "rules") module named by `option`; any failure
    of the import is a ModuleFailed of one line naming the module, the error, where it is
    (file:line) and what to do. Used by the commands and by `streams serve`'s workers."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise ModuleFailed(
                f"cannot import {kind} module {name!r}: no module named {exc.name!r}; check "
                f"the name given to {option} and that its folder is on PYTHONPATH") from exc
        raise ModuleFailed(f"cannot import {kind} module {name!r}: it imports "
                           f"{exc.name!r}, which is not installed") from exc
    except SyntaxError as exc:
        raise ModuleFailed(
            f"cannot import {kind} module {name!r}: syntax error at {exc.filename}:"
            f"{exc.lineno}: {exc.msg}; fix the module") from exc
    except Exception as exc:
        raise ModuleFailed(
            f"cannot import {kind} module {name!r}: {type(exc).__name__}: {exc} at "
            f"{_where(exc)}; fix the module") from exc


def _where(exc: BaseException) -> str:
    """file:line of the deepest frame of the traceback (where the user's code failed)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "an unknown place"
    return f"{frames[-1].filename}:{frames[-1].lineno}"


def module_rules(names: Iterable[str], option: str) -> list[Any]:
    """The RULES of the rules modules named (imported as `import_user_module` does), in
    order: what a server explains with `why` besides the installed rules."""
    rules: list[Any] = []
    for name in names:
        rules += list(getattr(import_user_module("rules", name, option), "RULES", []))
    return rules

