#!/bin/sh
# A health check with the official image's name and arguments (--bootstrap-server HOST:PORT):
# exits 0 when the broker there answers an ApiVersions request without an error.
exec python3 /opt/kafka/kafka_entrypoint.py --api-versions "$@"
