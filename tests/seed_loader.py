"""Loading tests/seed_000.py in a test process that also knows streams.examples.ops.

Both define the seed's feedback types under the same names, and a name is registered once per
process; a worker loads only one of them (`--types tests.seed_000`). In a test process the
seed's module takes the names for the test, and the project's types get them back after.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

from streams.core.feedback import registry

__all__ = ["SEED_DEPENDENTS", "SEED_MODULE", "SEED_TYPE_NAMES", "load_seed"]

SEED_MODULE = "tests.seed_000"
SEED_TYPE_NAMES = ("triage_quality", "should_have_fired", "resolution")
# Modules that import the seed's module: dropped with it, so none keeps an old copy.
SEED_DEPENDENTS = ("tests.integration.seed_000_rules", "tests.integration.seed_000_judge_rules")


def load_seed() -> Iterator[ModuleType]:
    """Body of a fixture: the seed's module, freshly executed, its types registered."""
    saved = {name: registry.get(name) for name in SEED_TYPE_NAMES}
    for name in SEED_TYPE_NAMES:
        registry.unregister(name)
    for module in (SEED_MODULE, *SEED_DEPENDENTS):
        sys.modules.pop(module, None)
    try:
        yield importlib.import_module(SEED_MODULE)
    finally:
        for module in (SEED_MODULE, *SEED_DEPENDENTS):
            sys.modules.pop(module, None)
        for name, cls in saved.items():
            registry.unregister(name)
            if cls is not None:
                registry.register(cls)
