"""The home of the HTTP surfaces (REST commands, the WebSocket stream, the MCP tool): one
service over the runtime's workspace handle. Nothing is served from here yet."""
