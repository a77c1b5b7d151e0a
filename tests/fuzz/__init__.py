"""Schemathesis against the broker's own OpenAPI document (see test_openapi_fuzz.py)."""
