"""Feedback types in throwaway modules, as an application would define them: a module file in
a temporary folder put on sys.path, forgotten (module and registered types) afterwards."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.core.feedback import registry

__all__ = ["UserModules"]


class UserModules:
    """Writes modules under a folder on sys.path; `forget()` unloads them and their types."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.made: list[str] = []

    def write(self, body: str, *, name: str | None = None) -> str:
        """A new module holding `body`; returns its (unique) name."""
        module = name or f"user_feedback_{uuid.uuid4().hex[:10]}"
        (self.folder / f"{module}.py").write_text(body)
        self.made.append(module)
        return module

    def unload(self, module: str) -> None:
        """Drop a module and unregister its feedback types, so a changed model can be loaded
        under the same feedback type name (as in a new process)."""
        sys.modules.pop(module, None)
        for cls in list(registry):
            if cls.__module__ == module:
                registry.unregister(cls.feedback_name)

    def forget(self) -> None:
        """Unload every module written."""
        for module in self.made:
            self.unload(module)


def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[UserModules]:
    """Body of a fixture: a UserModules on tmp_path, on sys.path for the test."""
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = UserModules(tmp_path)
    try:
        yield modules
    finally:
        modules.forget()
