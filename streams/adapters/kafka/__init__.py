"""Adapters to Kafka: admin, producing, reading the log. The domain never imports these."""
