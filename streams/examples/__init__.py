"""Ready feedback types and workloads used by the demo, the docs and the tests."""
