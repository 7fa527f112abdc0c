"""A database the code before the store package wrote (tests/fixtures/old_stores, made by its
make_old_stores.py) opens with today's store on both back ends: the old release's (schema 4) is
upgraded to the schema a fresh database gets, and the newest old one needs no migration and
already has that schema, so each migration's SQL is the one that shipped."""

import gzip
from pathlib import Path

import psycopg
import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import SessionStore
from chaz_nb.core.store.migrations import MIGRATIONS

OLD = Path(__file__).parent / "fixtures" / "old_stores"


def duckdb_schema(store) -> list:
    return [
        store.execute("SELECT table_name, column_name, data_type, column_default, is_nullable"
                      " FROM information_schema.columns ORDER BY table_name, column_name"),
        store.execute("SELECT index_name, sql FROM duckdb_indexes() ORDER BY index_name"),
        store.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY view_name"),
    ]


def pg_schema(store) -> list:
    return [
        store.execute("SELECT table_name, column_name, data_type, column_default, is_nullable"
                      " FROM information_schema.columns WHERE table_schema = current_schema()"
                      " ORDER BY table_name, column_name"),
        store.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                      " ORDER BY indexname"),
        # (a view's columns are above; its text as stored names the schema once dumped and restored)
        store.execute("SELECT viewname FROM pg_views WHERE schemaname = current_schema() ORDER BY viewname"),
        store.execute("SELECT sequence_name FROM information_schema.sequences ORDER BY 1"),
        store.execute("SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                      " WHERE n.nspname = current_schema() ORDER BY 1"),
    ]


def old_duckdb(version: str, tmp_path: Path) -> str:
    path = tmp_path / f"{version}.duckdb"
    path.write_bytes(gzip.decompress((OLD / f"{version}.duckdb.gz").read_bytes()))
    return str(path)


def old_postgres(version: str, url: str) -> str:
    with psycopg.connect(url, autocommit=True) as con:
        con.execute((OLD / f"{version}.pg.sql").read_text())
    return url


@pytest.fixture(params=["duckdb", "postgres"])
def old_store(request, tmp_path):
    """``(open_old(version), fresh_schema, schema_of)`` on one back end."""
    if request.param == "duckdb":
        with SessionStore(str(tmp_path / "fresh.duckdb")) as fresh:
            fresh_schema = duckdb_schema(fresh)
        return (lambda version: SessionStore(old_duckdb(version, tmp_path))), fresh_schema, duckdb_schema
    cluster = request.getfixturevalue("pg_cluster")
    with SessionStore.open(cluster.new_database()) as fresh:
        fresh_schema = pg_schema(fresh)
    return (lambda version: SessionStore.open(old_postgres(version, cluster.new_database()))), fresh_schema, pg_schema


def test_an_old_release_database_is_upgraded_to_the_schema_of_a_fresh_one(old_store):
    open_old, fresh_schema, schema_of = old_store
    with open_old("v4") as store:
        assert store.schema_version == len(MIGRATIONS)
        assert [r[0] for r in store.execute("SELECT name FROM _chaz_migrations ORDER BY name")] == \
            [m.name for m in MIGRATIONS]
        assert schema_of(store) == fresh_schema
        assert [e.content for e in store.entries(1)] == ["from the old release", "", "an old reply"]
        assert store.session(2).parent_id == 1 and store.session(1).title == "old"
        assert store.append(1, EntryType.MESSAGE, "user", "after the upgrade").seq == 4
        assert store.execute("SELECT run_id FROM runs") == [(2,)]


def test_the_newest_old_database_needs_no_migration_and_has_todays_schema(old_store):
    open_old, fresh_schema, schema_of = old_store
    with open_old("full") as store:
        assert [r[0] for r in store.execute("SELECT name FROM _chaz_migrations ORDER BY name")] == \
            [m.name for m in MIGRATIONS]
        assert schema_of(store) == fresh_schema
        assert [e.content for e in store.entries(1)] == ["from the old release", "", "an old reply"]
        assert store.append(1, EntryType.MESSAGE, "user", "still writable").seq == 4
