"""The MCP door: tools and resources an agent uses, over stdio (`jetdbt mcp`) or MCP's
streamable HTTP transport (beside the API, on its own port).

Every tool is one or more calls of the API's REST routes with the caller's own bearer
token, so the API's one authorisation path (`services/api/auth.py`, `boundary.py`)
decides each call, and a refusal is the route's own. This package checks no role or
project itself: it only hides from a token the tools whose routes its role cannot call.
It imports the SDK and `jetdbt.services.api`'s Structs, OpenAPI operations and route roles (to
describe the routes), and talks to nothing but the API: never to Postgres or NATS.
"""
