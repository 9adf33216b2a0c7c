"""The Python handle and what the surfaces share with it: the workspace handle
(workspace), idempotent commands and their ledger (commands), API keys (keys), live
subscriptions (subscription) and the proposal folds (folds). A new surface (streams.surfaces)
is built on these."""
