"""Both stores keep the declared contract (core/store/base.py); only the shared one has the
capability of sessions served across processes, and the serving strategy follows from it."""

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import SessionStore, SharedSessions, Store, served_elsewhere
from chaz_nb.server.serving import LocalServing, SharedServing, serving_for


def no_take_over(session_id: int) -> None:
    raise AssertionError(f"nothing to take over in session {session_id}")


async def no_stop(session_id: int, by: str) -> list:
    return []


def test_each_store_is_a_store_and_only_postgresql_shares_its_sessions(backend_store):
    assert isinstance(backend_store, Store)
    shared = backend_store.dialect == "postgresql"
    assert isinstance(backend_store, SharedSessions) is shared
    sid = backend_store.create_session("bot")
    assert served_elsewhere(backend_store, sid) is False


def test_a_duckdb_file_serves_every_session_here(tmp_path):
    with SessionStore(str(tmp_path / "s.duckdb")) as store:
        serving = serving_for(store, {"bot": object()}, no_take_over, lambda sid: True, no_stop)
        sid = store.create_session("someone-not-defined-here")
        assert isinstance(serving, LocalServing) and serving.relay is None
        assert serving.claim(sid) and serving.lease(sid) and serving.holds(sid)
        assert not serving.elsewhere(sid) and serving.status(sid) == "idle"
        assert serving.run_elsewhere(sid) is None


def test_on_postgresql_the_lease_holder_serves_and_the_other_kernel_sees_it_elsewhere(pg_url):
    first, second = SessionStore.open(pg_url), SessionStore.open(pg_url)
    taken: list[int] = []
    try:
        here = serving_for(first, {"bot": object()}, taken.append, lambda sid: True, no_stop)
        there = serving_for(second, {}, no_take_over, lambda sid: True, no_stop)
        assert isinstance(here, SharedServing) and isinstance(there, SharedServing)
        sid = first.create_session("bot")
        assert not there.claim(sid)  # it does not define the agent: it never takes the session
        here.serve_here(sid)
        assert taken == [sid] and here.holds(sid) and not here.elsewhere(sid)
        assert there.elsewhere(sid) and not there.lease(sid)
        first.append(sid, EntryType.MESSAGE, "user", "hi")  # a trigger nobody has answered yet
        second.catch_up()
        assert there.status(sid) == "running"
    finally:
        first.close()
        second.close()
