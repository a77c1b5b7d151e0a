"""The typed storage boundary: the pool, named statements and one typed function each.

Everything the core asks PostgreSQL goes through this package: SQL lives in
`schema/queries/*.sql`, each statement has one wrapper with keyword-only arguments that answers
dataclasses, and driver errors become core errors in one place (`database.translate`).
"""
