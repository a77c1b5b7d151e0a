"""Route handlers, one module per concept; `broker/table.py` lists them with their Structs."""
