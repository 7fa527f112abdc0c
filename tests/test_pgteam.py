"""A team on one PostgreSQL store (core/store/pgteam.py): two people's stores, connected as two
roles the administrator's script set up, on one real database. What one cannot see or change
of the other's, through the store, the views, ``%chaz sql``'s reader and a raw ``psql``; what a
share opens; and that nothing the owner wrote is lost or changed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from itertools import count

import pytest

from chaz_nb.core.entries import EntryType
from chaz_nb.core.store import SessionStore, StoreError
from chaz_nb.core.store.pgteam import set_up_team
from chaz_nb.server import sharing
from fakes.postgres import retire_team_role

psycopg = pytest.importorskip("psycopg")

_n = count(1)


def as_role(url: str, role: str) -> str:
    return url.replace("postgresql://chaz@", f"postgresql://{role}@", 1)


def admin_rows(url: str, query: str, params: tuple = ()) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as con:
        return con.execute(query, params).fetchall()


@pytest.fixture
def team(pg_cluster, pg_url):
    """``(admin_url, alice_store, bob_store, names)``: two persons of a team set up by
    ``set_up_team`` (roles are the cluster's, so their names are this test's own)."""
    n = next(_n)
    alice, bob, outsider = f"alice{n}", f"bob{n}", f"eve{n}"
    with psycopg.connect(pg_url, autocommit=True) as con:
        for role in (alice, bob, outsider):
            con.execute(f'CREATE ROLE "{role}" LOGIN')
    set_up_team(pg_url, [alice, bob])
    a = SessionStore.open(as_role(pg_url, alice))
    b = SessionStore.open(as_role(pg_url, bob))
    yield pg_url, a, b, {"alice": alice, "bob": bob, "outsider": outsider}
    a.close()
    b.close()
    retire_team_role(pg_url)


def private_session(a) -> tuple[int, list[int]]:
    """Alice's session: a Message, a run (opening Ack, reply), a parked approval request."""
    sid = a.create_session("helper")
    msg = a.append(sid, EntryType.MESSAGE, "user", "the secret plan")
    ack = a.append(sid, EntryType.ACK, "helper", "", payload={"trigger_id": msg.id})
    req = a.append(sid, EntryType.APPROVAL_REQUEST, "helper", "", tool_call_id="c1",
                   payload={"request_id": "r1", "tool_name": "deploy", "run_id": ack.id})
    return sid, [msg.id, ack.id, req.id]


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and text, text
    return text


def test_each_kernel_acts_as_its_login_role_and_its_entries_say_so(team):
    admin, a, b, who = team
    assert (a.role, b.role) == (who["alice"], who["bob"])
    assert a.confined and b.confined
    assert sharing.whoami(a).startswith(f"you are {who['alice']} on postgresql://")
    sid, _ = private_session(a)
    authors = admin_rows(admin, "SELECT DISTINCT author FROM entries WHERE session_id = %s", (sid,))
    assert authors == [(who["alice"],)]
    assert admin_rows(admin, "SELECT owner FROM sessions WHERE id = %s", (sid,)) == [(who["alice"],)]
    # the views say it: who ran the run, who decided
    assert a.read("SELECT author FROM runs WHERE session_id = ?", [sid]) == [(who["alice"],)]
    # a person cannot write another name
    with psycopg.connect(as_role(admin, who["bob"]), autocommit=True) as con:
        own = b.create_session("mine")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
            con.execute("INSERT INTO entries (id, session_id, seq, entry_type, sender, content, created_at, author)"
                        " VALUES (chaz_last_entry_id() + 1, %s, 1, 'Message', 'user', 'x', now(), %s)",
                        (own, who["alice"]))


def test_b_cannot_read_a_private_session_anywhere(team):
    admin, a, b, who = team
    sid, ids = private_session(a)
    assert [s.id for s in b.sessions()] == []
    with pytest.raises(StoreError) as caught:
        b.session(sid)
    assert f"ask {who['alice']} to `%chaz share {sid} @{who['bob']} --read`" in one_line(caught.value)
    assert b.entries(sid) == [] and b.entry(ids[0]) is None and b.latest(sid) is None
    # %chaz sql's reader role, and every audit view
    run = b.run_read_only(["SELECT count(*) FROM entries", "SELECT count(*) FROM sessions",
                           "SELECT count(*) FROM runs", "SELECT count(*) FROM approvals",
                           "SELECT count(*) FROM messages", "SELECT count(*) FROM data_egress"])
    assert run.role == "chaz_nb_reader" and not run.can_write
    assert [rows for _, rows, _ in run.results] == [[(0,)]] * 6
    assert a.run_read_only(["SELECT count(*) FROM entries"]).results[0][1] == [(3,)]


def test_b_cannot_write_decide_or_stop_in_a_private_session_and_nothing_is_lost(team):
    admin, a, b, who = team
    sid, _ = private_session(a)
    before = admin_rows(admin, "SELECT id, content, author FROM entries ORDER BY id")
    for entry_type in (EntryType.MESSAGE, EntryType.APPROVAL_DECISION):
        with pytest.raises(StoreError) as caught:
            b.append(sid, entry_type, "user", "let me in", payload={"request_id": "r1", "decision": "approved"})
        assert f"ask {who['alice']} to `%chaz share {sid} @{who['bob']}" in one_line(caught.value)
    with pytest.raises(StoreError) as caught:
        b.check_may(sid, "write")  # what a stop from B's kernel asks first (stop_relay.py)
    one_line(caught.value)
    # rewriting the log is refused outright, even of one's own session
    own = b.create_session("mine")
    b.append(own, EntryType.MESSAGE, "user", "mine")
    for statement in ("UPDATE entries SET content = 'gone'", "DELETE FROM entries"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            b.execute(statement)
    assert b.execute("UPDATE sessions SET title = 'mine now' WHERE id = ?", [sid]) == []
    after = admin_rows(admin, "SELECT id, content, author FROM entries WHERE id <= %s ORDER BY id", (before[-1][0],))
    assert after == before
    # ids stay store-wide: B's entry came after A's, not at B's own max(id) + 1
    assert b.entries(own)[0].id == before[-1][0] + 1


def test_a_share_opens_exactly_its_level_and_unshare_closes_it(team):
    admin, a, b, who = team
    sid, _ = private_session(a)
    bob = who["bob"]
    with pytest.raises(StoreError, match="only .* may share it"):
        b.share(sid, bob, "approve")  # not B's to share
    assert sharing.share(a, sid, [bob], "read").startswith(f"shared session {sid} with @{bob}: they may read it")
    assert [s.id for s in b.sessions()] == [sid] and len(b.entries(sid)) == 3
    with pytest.raises(StoreError, match="--write"):
        b.append(sid, EntryType.MESSAGE, "user", "hi")
    a.share(sid, bob, "write")
    b.append(sid, EntryType.MESSAGE, "user", "hi from bob")
    b.check_may(sid, "write")
    with pytest.raises(StoreError, match="--approve"):
        b.append(sid, EntryType.APPROVAL_DECISION, "user", "", payload={"request_id": "r1", "decision": "approved"})
    a.share(sid, bob, "approve")
    b.append(sid, EntryType.APPROVAL_DECISION, "user", "", payload={"request_id": "r1", "decision": "approved"})
    decided = a.read("SELECT decision, decided_as FROM approvals WHERE session_id = ?", [sid])
    assert decided == [("approved", bob)]
    assert a.shares(sid) == [(bob, "approve")] and b.shares(sid) == [(bob, "approve")]
    assert sharing.unshare(a, sid, [bob]) == f"session {sid} is no longer shared with @{bob}"
    assert b.sessions() == [] and b.entries(sid) == []
    # what B wrote while it could stays, with B's name
    assert admin_rows(admin, "SELECT author, content FROM entries WHERE session_id = %s AND entry_type = 'Message'"
                             " ORDER BY seq", (sid,)) == [(who["alice"], "the secret plan"), (bob, "hi from bob")]


def test_a_group_share_reaches_every_member(team):
    admin, a, b, who = team
    sid, _ = private_session(a)
    a.share(sid, "chaz_nb_team", "read")
    assert [s.id for s in b.sessions()] == [sid]


def test_b_cannot_change_a_agent_or_schedule(team):
    admin, a, b, who = team
    a.execute("INSERT INTO agent_definitions (name, definition, created_at, updated_at) VALUES (?, ?, now(), now())",
              ["helper", json.dumps({"model": "chaz/echo", "api_base": "https://a.example"})])
    a.execute("INSERT INTO schedules (id, agent, trigger, kind, prompt, created_at) VALUES"
              " (nextval('schedules_id_seq'), 'helper', 'every 1h', 'every', 'report', now())")
    assert b.execute("SELECT count(*) FROM agent_definitions") == [(0,)]
    assert b.execute("SELECT count(*) FROM schedules") == [(0,)]
    assert b.execute("UPDATE agent_definitions SET definition = '{\"api_base\": \"https://evil\"}'") == []
    assert b.execute("UPDATE schedules SET prompt = 'leak it'") == []
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
        b.execute("INSERT INTO agent_definitions (name, definition, created_at, updated_at, owner)"
                  " VALUES (?, ?, now(), now(), ?)", ["helper", json.dumps({"api_base": "https://evil"}), who["alice"]])
    # B's own @helper is another agent: B's kernel keeps and loads B's only
    from chaz_nb.server.agent_book import AgentBook
    from chaz_nb.server.agents import Agent

    AgentBook(b).keep(Agent("helper", model="chaz/echo"))
    assert list(AgentBook(b).load()) == ["helper"] and AgentBook(b).load()["helper"].api_base is None
    assert AgentBook(a).load()["helper"].api_base == "https://a.example"
    assert admin_rows(admin, "SELECT definition::text FROM agent_definitions WHERE owner = %s", (who["alice"],)) == [
        (json.dumps({"model": "chaz/echo", "api_base": "https://a.example"}),)]
    assert admin_rows(admin, "SELECT prompt FROM schedules") == [("report",)]


def test_a_stop_request_is_heard_only_from_a_role_that_may_write(team):
    """The serving kernel asks the database who sent a stop notice, not the payload."""
    admin, a, b, who = team
    sid, _ = private_session(a)
    heard: list[bool] = []

    async def scenario() -> None:
        got = asyncio.Event()

        def on_stop(payload: str) -> None:
            heard.append(a.notice_sender_may(sid, "write"))
            got.set()

        a.on_notice("chaz_stop", on_stop)
        await asyncio.wait_for(_listening(a), 20)
        for level in (None, "write"):
            if level:
                a.share(sid, who["bob"], level)
            got.clear()
            b.notify("chaz_stop", json.dumps({"stop": sid, "by": "user", "id": "x"}))
            await asyncio.wait_for(got.wait(), 20)

    asyncio.run(scenario())
    assert heard == [False, True]


async def _listening(store) -> None:
    """Until the store's listener has LISTENed (its backend shows up in pg_stat_activity's LISTEN)."""
    store.start_listener()
    while not store.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN chaz_agents%%'"
                            " AND usename = session_user")[0][0]:
        await asyncio.sleep(0.05)


def test_raw_psql_as_b_and_as_an_outsider(team, pg_cluster):
    admin, a, b, who = team
    sid, _ = private_session(a)

    binary = pg_cluster.bindir / "psql"
    binary = binary if binary.exists() else shutil.which("psql")
    if binary is None:
        pytest.skip("no psql client next to the cluster's binaries or on PATH")

    def psql(role: str, statement: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(binary), as_role(admin, role), "-XAtc", statement],
                              capture_output=True, text=True, timeout=60)

    assert psql(who["bob"], "SELECT count(*) FROM entries").stdout.strip() == "0"
    assert psql(who["bob"], "SELECT count(*) FROM runs").stdout.strip() == "0"
    assert psql(who["bob"], f"SELECT count(*) FROM entries WHERE session_id = {sid}").stdout.strip() == "0"
    refused = psql(who["bob"], "INSERT INTO entries (id, session_id, seq, entry_type, sender, created_at)"
                               f" VALUES (9999, {sid}, 99, 'Message', 'user', now())")
    assert "row-level security" in refused.stderr
    assert "permission denied" in psql(who["bob"], "DELETE FROM entries").stderr
    assert "permission denied" in psql(who["outsider"], "SELECT count(*) FROM entries").stderr
    assert admin_rows(admin, "SELECT count(*) FROM entries WHERE session_id = %s", (sid,)) == [(3,)]


def test_a_person_cannot_migrate_the_team_tables_and_is_told_who_can(team):
    admin, a, b, who = team
    from chaz_nb.core.store.migrations import MIGRATIONS, Migration
    from chaz_nb.core.store.postgres import PgSessionStore

    extra = Migration("999_test_only", lambda con: None, lambda con: con.execute("CREATE TABLE x_test (i int)"))
    with pytest.raises(StoreError) as caught:
        PgSessionStore(as_role(admin, who["bob"]), migrations=[*MIGRATIONS, extra])
    assert "pgteam ADMIN_URL" in one_line(caught.value)


def test_one_role_store_confines_nobody(pg_url):
    """No team roles made: the store behaves as before (the owner role reads every row, and
    sharing says it changes nothing)."""
    store = SessionStore.open(pg_url)
    try:
        sid = store.create_session("helper")
        store.append(sid, EntryType.MESSAGE, "user", "hi")
        assert not store.confined and store.may(sid, "approve")
        assert "no role is confined" in sharing.whoami(store)
        assert store.run_read_only(["SELECT count(*) FROM entries"]).results[0][1] == [(1,)]
    finally:
        store.close()
