"""Authentication and access control at the edge (wire-protocol §9).

    access.py   the access levels of the route table and which roles pass each
    errors.py   401 / 403 / 503 refusals
    tokens.py   JWT verification: algorithms, keys, claims, a cache of verified tokens
    jwks.py     signing keys from a JWKS URL, fetched and refreshed off the request path
    gate.py     one request's admission: skip paths, bearer token, identity, level
"""
