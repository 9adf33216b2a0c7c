"""Observability: the process's instruments (metrics) and the liveness/readiness server
(health). A new measure of the running pipeline (a counter, a gauge) goes in metrics."""
