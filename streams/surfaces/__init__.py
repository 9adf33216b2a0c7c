"""Ways in for people and operators: the command line and the demo today; HTTP surfaces
(REST, WebSocket, MCP) go in `streams.surfaces.http`."""
