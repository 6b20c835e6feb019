"""What pgqueue installed in a database, by name and definition, for comparing two ways of installing it.

:func:`schema_snapshot` reads the catalog of everything in the ``pgqueue`` schema: the schema itself,
functions (body, arguments, result, language, settings, volatility, strictness, parallel safety,
security definer, cost, owner, grants), relations (kind, persistence, storage options, row
security, replica identity, owner, grants), columns (position among the live columns, type,
collation, not null, default, identity, generated, statistics target, options, compression, grants),
constraints (of tables and domains), indexes, views, triggers, rules, policies, sequences (with
their owning column), types, extended statistics, comments (on anything, columns included) and
default privileges. Object ids, row versions and storage details left out on purpose: oids,
xmin, relfilenode, dropped columns, and ``atthasmissing`` (a column added to a table with a
default answers reads of older rows from the catalog; the same column created with its table
does not need to: no reader can tell the two apart). Of a column's options, ``pg_attver`` is left
out: the machine's PostgreSQL 15 build stamps every column it creates with one, different in
every database.
"""

from __future__ import annotations

import psycopg

# Each row: (kind, name, definition). Names print schema-qualified (the session's search_path is
# pg_catalog only).
SNAPSHOT = b"""
with ns as (select n.oid from pg_namespace n where n.nspname = 'pgqueue')
select 'schema', n.nspname::text,
       'owner=' || pg_get_userbyid(n.nspowner) || ' acl=' || coalesce(n.nspacl::text, '')
from pg_namespace n, ns where n.oid = ns.oid
union all
select 'function', p.oid::regprocedure::text,
       case when p.prokind in ('f', 'p', 'w') then pg_get_functiondef(p.oid) else '' end
       || ' kind=' || p.prokind::text || ' config=' || coalesce(array_to_string(p.proconfig, ';'), '')
       || ' volatility=' || p.provolatile::text || ' strict=' || p.proisstrict::text
       || ' parallel=' || p.proparallel::text || ' leakproof=' || p.proleakproof::text
       || ' security_definer=' || p.prosecdef::text || ' cost=' || p.procost::text || ' rows=' || p.prorows::text
       || ' owner=' || pg_get_userbyid(p.proowner) || ' acl=' || coalesce(p.proacl::text, '')
from pg_proc p, ns where p.pronamespace = ns.oid
union all
select 'relation', c.relname::text,
       'kind=' || c.relkind::text || ' persistence=' || c.relpersistence::text
       || ' options=' || coalesce(array_to_string(c.reloptions, ','), '')
       || ' rls=' || c.relrowsecurity::text || '/' || c.relforcerowsecurity::text
       || ' replica_identity=' || c.relreplident::text || ' partition=' || c.relispartition::text
       || ' owner=' || pg_get_userbyid(c.relowner) || ' acl=' || coalesce(c.relacl::text, '')
from pg_class c, ns where c.relnamespace = ns.oid
union all
select 'column', c.relname || '.' || a.attname,
       'position=' || row_number() over (partition by a.attrelid order by a.attnum)
       || ' type=' || format_type(a.atttypid, a.atttypmod)
       || ' collation=' || coalesce(nullif(a.attcollation, 0)::regcollation::text, '')
       || ' notnull=' || a.attnotnull::text
       || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
       || ' identity=' || a.attidentity::text || ' generated=' || a.attgenerated::text
       || ' statistics=' || coalesce(a.attstattarget::int, -1)
       || ' options=' || array_to_string(array(select o from unnest(a.attoptions) o
                                               where o not like 'pg_attver=%'), ',')
       || ' compression=' || a.attcompression::text
       || ' acl=' || coalesce(a.attacl::text, '')
from pg_attribute a join pg_class c on c.oid = a.attrelid
left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
join ns on c.relnamespace = ns.oid
where a.attnum > 0 and not a.attisdropped
union all
select 'constraint', coalesce(nullif(k.conrelid, 0)::regclass::text, k.contypid::regtype::text) || '.' || k.conname,
       'type=' || k.contype::text || ' ' || pg_get_constraintdef(k.oid) || ' valid=' || k.convalidated::text
       || ' local=' || k.conislocal::text || ' inherited=' || k.coninhcount::text
from pg_constraint k, ns where k.connamespace = ns.oid
union all
select 'index', i.indexrelid::regclass::text,
       pg_get_indexdef(i.indexrelid) || ' clustered=' || i.indisclustered::text
       || ' replica_identity=' || i.indisreplident::text || ' valid=' || i.indisvalid::text
from pg_index i join pg_class c on c.oid = i.indexrelid join ns on c.relnamespace = ns.oid
union all
select 'view', c.oid::regclass::text, pg_get_viewdef(c.oid)
from pg_class c, ns where c.relnamespace = ns.oid and c.relkind in ('v', 'm')
union all
select 'trigger', t.tgrelid::regclass::text || '.' || t.tgname,
       pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
from pg_trigger t join pg_class c on c.oid = t.tgrelid join ns on c.relnamespace = ns.oid
where not t.tgisinternal
union all
select 'rule', r.schemaname || '.' || r.tablename || '.' || r.rulename, r.definition
from pg_rules r where r.schemaname = 'pgqueue'
union all
select 'policy', p.schemaname || '.' || p.tablename || '.' || p.policyname,
       p.permissive || ' ' || p.cmd || ' ' || p.roles::text || ' ' || coalesce(p.qual, '') || ' '
       || coalesce(p.with_check, '')
from pg_policies p where p.schemaname = 'pgqueue'
union all
select 'sequence', s.seqrelid::regclass::text,
       format_type(s.seqtypid, null) || ' start=' || s.seqstart || ' increment=' || s.seqincrement
       || ' min=' || s.seqmin || ' max=' || s.seqmax || ' cache=' || s.seqcache || ' cycle=' || s.seqcycle::text
       || ' owned_by=' || coalesce((select dep.refobjid::regclass::text || '.' || dep.refobjsubid
                                    from pg_depend dep
                                    where dep.classid = 'pg_class'::regclass and dep.objid = s.seqrelid
                                      and dep.refclassid = 'pg_class'::regclass and dep.deptype in ('a', 'i')), '')
from pg_sequence s join pg_class c on c.oid = s.seqrelid join ns on c.relnamespace = ns.oid
union all
select 'type', t.oid::regtype::text,
       'type=' || t.typtype::text || ' relation=' || coalesce(nullif(t.typrelid, 0)::regclass::text, '')
       || ' labels=' || coalesce((select string_agg(e.enumlabel, ',' order by e.enumsortorder)
                                  from pg_enum e where e.enumtypid = t.oid), '')
       || ' base=' || coalesce(nullif(t.typbasetype, 0)::regtype::text, '')
       || ' acl=' || coalesce(t.typacl::text, '')
from pg_type t, ns where t.typnamespace = ns.oid
union all
select 'statistics', x.oid::text, pg_get_statisticsobjdef(x.oid)
from pg_statistic_ext x, ns where x.stxnamespace = ns.oid
union all
select 'comment', o.type || ' ' || o.identity, d.description
from pg_description d, pg_identify_object(d.classoid, d.objoid, d.objsubid) o
where o.schema = 'pgqueue' or (o.type = 'schema' and o.identity = 'pgqueue')
union all
select 'default privileges', pg_get_userbyid(a.defaclrole) || ' ' || a.defaclobjtype::text, a.defaclacl::text
from pg_default_acl a, ns where a.defaclnamespace = ns.oid
order by 1, 2, 3
"""

# Every kind a pgqueue database has today (rules, policies, statistics and default privileges
# it has none of; they are compared all the same).
KINDS = {"schema", "function", "relation", "column", "constraint", "index", "view", "trigger", "sequence", "type",
         "comment"}

Snapshot = list[tuple[str, str, str]]


def schema_snapshot(dsn: str) -> Snapshot:
    """Everything pgqueue installed in the database at ``dsn``, by name and definition, sorted."""
    with psycopg.connect(dsn) as conn:
        conn.execute(b"set search_path = pg_catalog")  # names print schema-qualified
        return [(str(a), str(b), str(c)) for a, b, c in conn.execute(SNAPSHOT).fetchall()]


def differences(left: Snapshot, right: Snapshot, names: tuple[str, str] = ("upgraded", "fresh")) -> str:
    """What only one side has, object by object (empty when the snapshots are equal)."""
    a, b = set(left), set(right)
    lines = [f"only {names[0]}: {row}" for row in sorted(a - b)] + [f"only {names[1]}: {row}" for row in sorted(b - a)]
    return "\n".join(lines)
