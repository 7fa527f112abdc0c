"""The SQL of a team on one PostgreSQL store (``pgteam.py`` says what it does): migration
021's body (``TEAM_SCHEMA``) and what an administrator runs (``TEAM_ROLES_SQL``,
``TEAM_GRANTS_SQL``). The role names are fixed: the policies name ``chaz_nb_team``."""

from __future__ import annotations

#: the group role whose members are confined to what they own or what is shared with them
TEAM_ROLE = "chaz_nb_team"
#: the role that owns a team's tables (NOLOGIN: its rows pass row-level security)
OWNER_ROLE = "chaz_nb_owner"
#: the reader role of ``%chaz sql`` (``core/pgreader.py``)
READER_ROLE = "chaz_nb_reader"
#: share levels, lowest first: each includes the ones before it
LEVELS = ("read", "write", "approve")

#: the body of migration 021 (``{schema}``: the store's schema, quoted)
TEAM_SCHEMA = r"""
ALTER TABLE entries ADD COLUMN author VARCHAR;
ALTER TABLE entries ALTER COLUMN author SET DEFAULT session_user;
ALTER TABLE sessions ADD COLUMN owner VARCHAR NOT NULL DEFAULT session_user;
ALTER TABLE schedules ADD COLUMN owner VARCHAR NOT NULL DEFAULT session_user;
ALTER TABLE agent_definitions ADD COLUMN owner VARCHAR NOT NULL DEFAULT session_user;
ALTER TABLE agent_sessions ADD COLUMN owner VARCHAR NOT NULL DEFAULT session_user;
-- each person keeps agents under their own names (two people's @assistant are two agents)
ALTER TABLE agent_definitions DROP CONSTRAINT agent_definitions_pkey, ADD PRIMARY KEY (owner, name);
ALTER TABLE agent_sessions DROP CONSTRAINT agent_sessions_pkey, ADD PRIMARY KEY (owner, agent);
CREATE TABLE session_shares (
    session_id BIGINT NOT NULL,
    grantee VARCHAR NOT NULL,
    level VARCHAR NOT NULL CHECK (level IN ('read', 'write', 'approve')),
    granted_by VARCHAR NOT NULL DEFAULT session_user,
    granted_at TIMESTAMP NOT NULL DEFAULT (now() at time zone 'utc'),
    PRIMARY KEY (session_id, grantee)
);

-- whether this login is confined: a member of chaz_nb_team (no such role: nobody is); an
-- administrator (superuser, BYPASSRLS) never is, as row-level security never holds them
CREATE OR REPLACE FUNCTION chaz_role_confined(who text) RETURNS boolean LANGUAGE sql STABLE AS $f$
SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'chaz_nb_team')
            THEN coalesce(pg_has_role(who, 'chaz_nb_team', 'MEMBER'), true)
                 AND NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = who AND (rolsuper OR rolbypassrls))
            ELSE false END $f$;
CREATE OR REPLACE FUNCTION chaz_confined() RETURNS boolean LANGUAGE sql STABLE AS $f$
SELECT chaz_role_confined(session_user) $f$;
CREATE OR REPLACE FUNCTION chaz_level(level text) RETURNS int LANGUAGE sql IMMUTABLE AS $f$
SELECT CASE level WHEN 'read' THEN 1 WHEN 'write' THEN 2 WHEN 'approve' THEN 3 ELSE 0 END $f$;

-- the sessions this login may use at a level: its own and those shared with it (or a group of
-- it); SECURITY DEFINER: run as the tables' owner, which row-level security lets read all
CREATE OR REPLACE FUNCTION chaz_session_ids(need int) RETURNS SETOF bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $f$
SELECT id FROM sessions WHERE owner = session_user
UNION
SELECT h.session_id FROM session_shares h JOIN pg_roles r ON r.rolname = h.grantee
WHERE chaz_level(h.level) >= need AND pg_has_role(session_user, r.oid, 'MEMBER') $f$;
-- whether role ``who`` may use session ``sid`` at level ``need`` (a stop request's sender: the
-- serving kernel asks it of the role PostgreSQL says sent the request)
CREATE OR REPLACE FUNCTION chaz_role_may(who text, sid bigint, need int) RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $f$
SELECT coalesce(NOT chaz_role_confined(who) OR EXISTS (SELECT 1 FROM sessions WHERE id = sid AND owner = who)
    OR EXISTS (SELECT 1 FROM session_shares h JOIN pg_roles r ON r.rolname = h.grantee
               WHERE h.session_id = sid AND chaz_level(h.level) >= need
                 AND pg_has_role(who, r.oid, 'MEMBER')), false) $f$;
CREATE OR REPLACE FUNCTION chaz_may(sid bigint, need int) RETURNS boolean LANGUAGE sql STABLE AS $f$
SELECT chaz_role_may(session_user, sid, need) $f$;
CREATE OR REPLACE FUNCTION chaz_session_owner(sid bigint) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $f$
SELECT owner FROM sessions WHERE id = sid $f$;
-- store-wide ids: a confined login's max(id) would see its own rows only
CREATE OR REPLACE FUNCTION chaz_last_entry_id() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $f$
SELECT coalesce(max(id), 0) FROM entries $f$;
CREATE OR REPLACE FUNCTION chaz_last_session_id() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {schema}, pg_temp AS $f$
SELECT coalesce(max(id), 0) FROM sessions $f$;

ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY chaz_read ON sessions FOR SELECT
    USING (NOT chaz_confined() OR owner = session_user OR id IN (SELECT chaz_session_ids(1)));
CREATE POLICY chaz_add ON sessions FOR INSERT WITH CHECK (NOT chaz_confined() OR owner = session_user);
-- rooms and schedules rewrite a session's metadata; nobody gives a session away
CREATE POLICY chaz_change ON sessions FOR UPDATE USING (chaz_may(id, 2))
    WITH CHECK (NOT chaz_confined() OR owner IS NOT DISTINCT FROM chaz_session_owner(id));
CREATE POLICY chaz_remove ON sessions FOR DELETE USING (NOT chaz_confined() OR owner = session_user);

ALTER TABLE entries ENABLE ROW LEVEL SECURITY;
CREATE POLICY chaz_read ON entries FOR SELECT
    USING (NOT chaz_confined() OR session_id IN (SELECT chaz_session_ids(1)));
-- the log is append-only for a team (no UPDATE or DELETE policy); a decision needs approve
CREATE POLICY chaz_add ON entries FOR INSERT WITH CHECK (NOT chaz_confined() OR (
    author = session_user
    AND chaz_may(session_id, CASE WHEN entry_type = 'ApprovalDecision' THEN 3 ELSE 2 END)));
CREATE POLICY chaz_unconfined ON entries FOR UPDATE USING (NOT chaz_confined());
CREATE POLICY chaz_unconfined_delete ON entries FOR DELETE USING (NOT chaz_confined());

ALTER TABLE session_shares ENABLE ROW LEVEL SECURITY;
CREATE POLICY chaz_read ON session_shares FOR SELECT
    USING (NOT chaz_confined() OR session_id IN (SELECT chaz_session_ids(1)));
CREATE POLICY chaz_owner ON session_shares
    USING (NOT chaz_confined() OR chaz_session_owner(session_id) = session_user)
    WITH CHECK (NOT chaz_confined() OR (chaz_session_owner(session_id) = session_user
                                        AND granted_by = session_user));

ALTER TABLE schedules ENABLE ROW LEVEL SECURITY;
CREATE POLICY chaz_own ON schedules
    USING (NOT chaz_confined() OR owner = session_user) WITH CHECK (NOT chaz_confined() OR owner = session_user);
ALTER TABLE schedule_fires ENABLE ROW LEVEL SECURITY;
CREATE POLICY chaz_own ON schedule_fires
    USING (NOT chaz_confined() OR schedule_id IN (SELECT id FROM schedules))
    WITH CHECK (NOT chaz_confined() OR schedule_id IN (SELECT id FROM schedules));

-- an agent's definition: its owner's to change; readable where a session of it is
ALTER TABLE agent_definitions ENABLE ROW LEVEL SECURITY;
CREATE POLICY chaz_read ON agent_definitions FOR SELECT
    USING (NOT chaz_confined() OR owner = session_user OR name IN (SELECT agent FROM sessions));
CREATE POLICY chaz_own ON agent_definitions
    USING (NOT chaz_confined() OR owner = session_user) WITH CHECK (NOT chaz_confined() OR owner = session_user);
ALTER TABLE agent_sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY chaz_own ON agent_sessions
    USING (NOT chaz_confined() OR owner = session_user) WITH CHECK (NOT chaz_confined() OR owner = session_user);
"""


def team_schema(schema: str) -> str:
    """``TEAM_SCHEMA`` for the store in ``schema``."""
    return TEAM_SCHEMA.replace("{schema}", '"' + schema.replace('"', '""') + '"')


#: what an administrator runs once (as a superuser or a CREATEROLE role that may grant on the
#: schema), before the tables exist or after: the roles, and what each may do with the tables
#: the owner role makes (``set_up_team`` runs it, then the migrations as the owner role)
TEAM_ROLES_SQL = """
DO $$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'chaz_nb_owner') THEN CREATE ROLE chaz_nb_owner NOLOGIN; END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'chaz_nb_team') THEN CREATE ROLE chaz_nb_team NOLOGIN; END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'chaz_nb_reader') THEN
    CREATE ROLE chaz_nb_reader NOLOGIN NOINHERIT;
  END IF;
END $$;
GRANT USAGE, CREATE ON SCHEMA public TO chaz_nb_owner;
GRANT USAGE ON SCHEMA public TO chaz_nb_team, chaz_nb_reader;
ALTER DEFAULT PRIVILEGES FOR ROLE chaz_nb_owner IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO chaz_nb_team;
ALTER DEFAULT PRIVILEGES FOR ROLE chaz_nb_owner IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO chaz_nb_team;
ALTER DEFAULT PRIVILEGES FOR ROLE chaz_nb_owner IN SCHEMA public GRANT SELECT ON TABLES TO chaz_nb_reader;
"""

#: after the owner role made (or upgraded) the tables: the grants on what already exists; the
#: log stays append-only for every person
TEAM_GRANTS_SQL = """
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO chaz_nb_team;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO chaz_nb_team;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO chaz_nb_reader;
REVOKE UPDATE, DELETE, TRUNCATE ON entries, _chaz_migrations FROM chaz_nb_team;
"""
