"""The proposal-outcome evaluator's state in a process: one incremental `ProposalFold` per
workspace (and evaluator) over a tenant's log as this process has read it.

Each call folds only the envelopes appended to the tenant's log view since the fold's last
call (it remembers its position in the view), so deciding on a resolution costs the new
records, never the whole log. The workspace handle catches its log view up to the log's end
before asking (`Workspace.proposal_fold`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from streams.core.actors import AnyActor
from streams.core.events import Envelope
from streams.core.proposals.fold import ProposalFold

__all__ = ["ProposalFolds"]


class ProposalFolds:
    """Incremental proposal folds of one tenant's workspaces, fed from its log view."""

    def __init__(self) -> None:
        self._folds: dict[tuple[str, str], ProposalFold] = {}
        self._positions: dict[tuple[str, str], int] = {}
        self.fed = 0
        """Envelopes of the view looked at, over all calls (what the folds cost)."""
        # Thread lock: handles are used from several event loops and threads.
        self._lock = threading.Lock()

    def fold(self, envelopes: Sequence[Envelope], workspace: str,
             evaluator: AnyActor) -> ProposalFold:
        """The workspace's fold for `evaluator`, fed `envelopes[position:]` (the view's
        records since its last call, those of the workspace folded), as of `envelopes`'
        length now. `envelopes` must only grow between calls (the log view does)."""
        key = (workspace, evaluator.participant)
        with self._lock:
            fold = self._folds.get(key)
            if fold is None:
                fold = self._folds[key] = ProposalFold(evaluator)
            start, end = self._positions.get(key, 0), len(envelopes)
            for i in range(start, end):  # indexing: a slice or islice would cost the log
                envelope = envelopes[i]
                if envelope.workspace == workspace:
                    fold.add(envelope)
            self._positions[key] = end
            self.fed += end - start
            return fold
