"""Factories shared by the client's unit tests."""

from streams.runtime.client.workspace import StreamsClient
from streams.runtime.root import Runtime
from streams.settings import Settings
from tests.conftest import _free_port


def offline_client() -> StreamsClient:
    """A client pointed at a port nobody listens on: anything that reaches for the broker or
    the registry fails with a connection error, so a test shows what happens before any I/O."""
    port = _free_port()
    return StreamsClient(Runtime(Settings(bootstrap_servers=f"127.0.0.1:{port}",
                                  schema_registry_url=f"http://127.0.0.1:{port}")))
