"""TLS on the listeners: certificates replaced without a restart (`rotation`), and the
client certificate as an identity (`peer`). The settings and the contexts are core/tls.py's.
"""
