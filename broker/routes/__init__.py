"""Route modules, one per concept; each exposes `routes`, a list of Starlette routes."""
