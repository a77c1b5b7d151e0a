"""The HTTP edge's vocabulary: one msgspec Struct per request and response body, typed query
and path parameters, the decoders that check them, and JSON answers.

`types` holds the checked scalars (names, ids, timestamps); `decoding` turns bodies, query
strings and path parameters into Structs with errors naming the field; `http` reads bodies
and writes answers. The other modules hold one route family's Structs each.
"""
