"""The pure core: feedback types, targets, actors, events, derived ids, scores, the rule
language and engine, runs, evaluators, measures and proposals.

Nothing under this package imports Kafka, Faust, HTTP clients, the schema registry or
OpenTelemetry (tests/test_layers.py derives the list from this folder), so every module here
runs in memory: in unit tests, in offline replays and experiments, and inside the workers.
"""
