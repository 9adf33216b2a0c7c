"""The streaming shell: the composition root, the Faust worker with the feedback mirror and
the rules reactor, the decider of stateful rules, the run executor, the sink runner and the
workspace handle. Thin: each decodes, calls the core, and produces through the adapters."""
