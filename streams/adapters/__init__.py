"""Adapters: the core's records and ports on real systems (Avro and the schema registry,
Kafka, Langfuse, the chat model behind the LLM judges). They depend on the core, never the
reverse, and hold no long-running loops: those are the runtime's."""
