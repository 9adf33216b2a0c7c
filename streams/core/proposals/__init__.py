"""The home of proposals: artifacts and their versions, proposals and their resolutions,
folded by a pure ledger, and the proposal-outcome evaluator's decision (accepted, edited,
rejected). Nothing is defined here yet."""
