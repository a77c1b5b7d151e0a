"""A database's schema `queen` as text, read from PostgreSQL's catalog, for comparing two
databases: relations (tables, sequences, composite types, views with their definitions) with
their persistence and options, columns in order (type, nullability, default, collation, storage), constraints,
indexes, sequences, enum and domain types, triggers, comments and every function's complete
definition (pg_get_functiondef: arguments, answer, language, settings, body).

What the catalog says about rows is left out (the ledger's rows, row counts): two databases
compared here may hold different data."""

from __future__ import annotations

import asyncpg

# Every query answers (kind, text) rows; the dump is their sorted union, one line each.
_QUERIES = [
    """SELECT 'relation', c.relname || ' kind=' || c.relkind::text || ' persistence='
              || c.relpersistence::text || ' replica=' || c.relreplident::text
              || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
         FROM pg_class c
        WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind IN ('r','p','v','m','S','f','c')""",
    """SELECT 'column', c.relname || '.' || a.attname
              || ' #' || row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum)
              || ' ' || format_type(a.atttypid, a.atttypmod)
              || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
              || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
              || coalesce(' collate ' || co.collname, '')
              || ' storage=' || a.attstorage::text
              || CASE WHEN a.attidentity <> '' THEN ' identity=' || a.attidentity::text ELSE '' END
              || CASE WHEN a.attgenerated <> '' THEN ' generated=' || a.attgenerated::text ELSE '' END
         FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid
         LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
         LEFT JOIN pg_collation co ON co.oid = a.attcollation
                                  AND a.attcollation <> 'default'::regcollation
        WHERE c.relnamespace = 'queen'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped""",
    """SELECT 'constraint', c.conrelid::regclass::text || ' ' || c.conname || ' '
              || pg_get_constraintdef(c.oid)
         FROM pg_constraint c
        WHERE c.connamespace = 'queen'::regnamespace""",
    """SELECT 'view', c.relname || ' ' || pg_get_viewdef(c.oid)
         FROM pg_class c
        WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind IN ('v', 'm')""",
    """SELECT 'index', pg_get_indexdef(i.indexrelid)
         FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE c.relnamespace = 'queen'::regnamespace""",
    """SELECT 'sequence', s.seqrelid::regclass::text || ' ' || format_type(s.seqtypid, NULL)
              || ' start=' || s.seqstart || ' increment=' || s.seqincrement
              || ' min=' || s.seqmin || ' max=' || s.seqmax || ' cache=' || s.seqcache
              || ' cycle=' || s.seqcycle
         FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
        WHERE c.relnamespace = 'queen'::regnamespace""",
    """SELECT 'type', t.typname || ' ' || t.typtype::text
              || coalesce(' base=' || format_type(t.typbasetype, t.typtypmod), '')
              || coalesce(' check=' || (SELECT string_agg(pg_get_constraintdef(k.oid), ' '
                                                          ORDER BY k.conname)
                                          FROM pg_constraint k WHERE k.contypid = t.oid), '')
              || coalesce(' labels=' || (SELECT string_agg(e.enumlabel, ','
                                                           ORDER BY e.enumsortorder)
                                           FROM pg_enum e WHERE e.enumtypid = t.oid), '')
         FROM pg_type t
        WHERE t.typnamespace = 'queen'::regnamespace AND t.typtype IN ('c', 'd', 'e')
          AND (t.typrelid = 0 OR (SELECT relkind FROM pg_class WHERE oid = t.typrelid) = 'c')""",
    """SELECT 'trigger', pg_get_triggerdef(t.oid)
         FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = 'queen'::regnamespace AND NOT t.tgisinternal""",
    """SELECT 'function', pg_get_functiondef(p.oid)
         FROM pg_proc p
        WHERE p.pronamespace = 'queen'::regnamespace AND p.prokind IN ('f', 'p')""",
    """SELECT 'aggregate', p.oid::regprocedure::text
         FROM pg_proc p
        WHERE p.pronamespace = 'queen'::regnamespace AND p.prokind NOT IN ('f', 'p')""",
    """SELECT 'comment', coalesce(c.oid::regclass::text, p.oid::regprocedure::text,
                                   t.oid::regtype::text) || '/' || d.objsubid
              || ' ' || d.description
         FROM pg_description d
         LEFT JOIN pg_class c ON d.classoid = 'pg_class'::regclass AND c.oid = d.objoid
         LEFT JOIN pg_proc p ON d.classoid = 'pg_proc'::regclass AND p.oid = d.objoid
         LEFT JOIN pg_type t ON d.classoid = 'pg_type'::regclass AND t.oid = d.objoid
        WHERE 'queen'::regnamespace IN (c.relnamespace, p.pronamespace, t.typnamespace)""",
    """SELECT 'extension', e.extname || ' ' || e.extversion FROM pg_extension e""",
]


async def catalog(conn: asyncpg.Connection) -> list[str]:
    """Schema `queen` as sorted lines of text (see the module's docstring)."""
    lines: list[str] = []
    for query in _QUERIES:
        lines.extend(f"{kind}: {text}" for kind, text in await conn.fetch(query))
    return sorted(lines)


async def catalog_of(url: str) -> list[str]:
    conn = await asyncpg.connect(url)
    try:
        return await catalog(conn)
    finally:
        await conn.close()
