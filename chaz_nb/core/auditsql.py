"""The audit views (tool_calls, runs, approvals, messages, branches, data_egress,
variable_changes), written once for both SQL dialects.

Each view is a function of a ``Dialect``: the few things DuckDB and PostgreSQL spell
differently (reading a JSON field, a cast that yields NULL on bad input, milliseconds between
two timestamps, one JSON parse for several fields) are its methods, and everything else is
plain SQL both run. ``core/audit.py`` (DuckDB) and ``core/store/migrations.py`` (PostgreSQL) create
``DUCKDB.views()`` and ``POSTGRES.views()``; a change to a view is made here, once, and ships
as a new migration in both lists (the record keeps the names).

The views read only what was recorded at write time (token usage and cost live in the
entries' payload), so they need no model at query time and work on any notebook's store.
"""

from __future__ import annotations

from collections.abc import Sequence

#: the view names, in creation order (approvals first: nothing reads it, runs reads entries)
VIEWS = ("approvals", "tool_calls", "runs", "messages", "branches", "data_egress", "variable_changes")


def author_column(dialect: Dialect, table: str, authors: bool, name: str = "author") -> str:
    """``, t.author``: the PostgreSQL role that wrote the row's entry (who ran a run, decided an
    approval, sent data), the last column of a view; NULL on DuckDB (one person's file, no
    roles). None before the column existed on PostgreSQL (``authors=False``)."""
    return f", {dialect.author(table)} AS {name}" if authors else ""


def copied_column(table: str, forks: bool) -> str:
    """``, t.copied_from``: the last column of a view whose row a fork may have copied (the
    source's entry it copies; NULL for the session's own activity). None before the fork
    columns existed (``forks=False``)."""
    return f", {table}.copied_from" if forks else ""


class Dialect:
    """DuckDB's spelling; ``PostgresDialect`` overrides what PostgreSQL spells differently."""

    name = "duckdb"
    #: the floating-point type's name
    double = "DOUBLE"

    def author(self, table: str) -> str:
        """Who wrote ``table``'s entry: no roles on DuckDB."""
        del table
        return "CAST(NULL AS VARCHAR)"

    def text(self, obj: str, key: str) -> str:
        """A JSON field as text (NULL when absent)."""
        return f"json_extract_string({obj}, '$.{key}')"

    def json(self, obj: str, key: str) -> str:
        """A JSON field as JSON."""
        return f"json_extract({obj}, '$.{key}')"

    def try_cast(self, expr: str, sql_type: str) -> str:
        """``expr`` as BIGINT, INTEGER, DOUBLE or BOOLEAN; NULL where it is not one."""
        return f"TRY_CAST({expr} AS {sql_type})"

    def ms_between(self, start: str, end: str) -> str:
        return f"date_diff('microsecond', {start}, {end}) / 1000.0"

    def text_at(self, obj: str, *keys: str) -> str:
        """A nested JSON field as text (``text_at(p, 'egress', 'agent')``)."""
        return f"json_extract_string({obj}, '$.{'.'.join(keys)}')"

    def json_at(self, obj: str, *keys: str) -> str:
        return f"json_extract({obj}, '$.{'.'.join(keys)}')"

    def each(self, array: str, alias: str) -> str:
        """A FROM item: one row per element of a JSON array, the element as ``alias.value``."""
        return f"json_each({array}) AS {alias}"

    def fields(self, obj: str, keys: Sequence[str], alias: str) -> str:
        """Several fields of one JSON value in one parse (a parse per field costs 3x on big
        stores), selected as ``alias``; ``field`` reads one of them."""
        paths = ", ".join(f"'$.{k}'" for k in keys)
        return f"json_extract_string({obj}, [{paths}]) AS {alias}"

    def field(self, alias: str, keys: Sequence[str], key: str) -> str:
        return f"{alias}[{list(keys).index(key) + 1}]"

    # ------------------------------------------------------------- the views
    def views(self, forks: bool = True, authors: bool = True) -> list[tuple[str, str]]:
        """``(name, CREATE OR REPLACE VIEW ...)`` of every audit view, in creation order.

        ``forks=False``: the forms before the fork columns existed (the migrations before
        ``fork_branches`` create the views too, on a schema that has no such column yet);
        ``authors=False``: the forms before ``entries.author`` (PostgreSQL's ``team_roles``)."""
        views = [("approvals", self.approvals(forks, authors)), ("tool_calls", self.tool_calls(forks)),
                 ("runs", self.runs(forks, authors)), ("messages", messages_view(forks, self, authors))]
        if forks:
            views.append(("branches", self.branches()))
        return views + [("data_egress", self.data_egress(forks, authors)),
                        ("variable_changes", self.variable_changes(forks))]

    def data_egress(self, forks: bool = True, authors: bool = False) -> str:
        """One row per tool result or Message attachment that sent the notebook's data to a
        model (the kernel's tools write an ``egress`` payload: server/kernel/), and per
        branch's first run that sent its copied context to another model (server/egress.py); a
        fork's copy of one names the source's entry (``copied_from``: it sent nothing itself)."""
        t, cast = self.text_at, self.try_cast
        # a Message's attachments (%chaz --with) are written before the run that reads them:
        # their run is the first run of that agent opened in the session after the Message
        answering_run = (
            "(SELECT min(a.id) FROM entries a WHERE a.session_id = e.session_id AND a.entry_type = 'Ack'"
            f" AND a.run_id = a.id AND a.id > e.id AND a.sender = {t('e.payload', 'egress', 'agent')})")
        return f"""
CREATE OR REPLACE VIEW data_egress AS
SELECT e.id AS entry_id,
       CASE WHEN e.entry_type = 'Message' THEN coalesce(e.run_id, {answering_run})
            -- the record of a send a person was asked about, written once the run's Ack had landed
            WHEN e.entry_type = 'Ack' THEN coalesce(e.run_id, {cast(t('e.payload', 'egress', 'run_id'), 'BIGINT')})
            ELSE e.run_id END AS run_id,
       e.session_id,
       coalesce({t('e.payload', 'egress', 'agent')}, s.agent) AS agent,
       {t('e.payload', 'egress', 'model')} AS model,
       {t('e.payload', 'egress', 'provider')} AS provider,
       {t('e.payload', 'egress', 'host')} AS host,
       CASE WHEN e.entry_type = 'ToolResult' THEN e.tool_name
            -- a run's context (or a compaction's) sending the notebook's data to a model or host
            -- it never went to: context, fork_context, compaction (server/egress.py)
            WHEN e.entry_type IN ('Ack', 'Summary') THEN coalesce({t('e.payload', 'egress', 'via')}, 'fork_context')
            ELSE 'attachment' END AS via,
       e.tool_call_id,
       {self.json_at('e.payload', 'egress', 'variables')} AS variables,
       {cast(t('e.payload', 'egress', 'rows'), 'BIGINT')} AS rows_sent,
       {cast(t('e.payload', 'egress', 'columns'), 'BIGINT')} AS columns_sent,
       {cast(t('e.payload', 'egress', 'chars'), 'BIGINT')} AS chars_sent,
       {t('e.payload', 'egress', 'policy')} AS policy,
       -- the egress gate's decision (server/egress_gate.py): allow (the agent's rule or hosts),
       -- allow_once, allow_session, deny, timed_out; NULL before the gate
       {t('e.payload', 'egress', 'decision')} AS decision,
       e.created_at{copied_column('e', forks)}{author_column(self, 'e', authors)}
FROM entries e JOIN sessions s ON s.id = e.session_id
WHERE e.entry_type IN ('ToolResult', 'Message', 'Ack', 'Summary') AND {self.json_at('e.payload', 'egress')} IS NOT NULL
"""

    def variable_changes(self, forks: bool = True) -> str:
        """One row per namespace change a ``kernel__run`` call made (its ToolResult's payload;
        ``copied_from``: a fork's copy of the source's), and per change an undo of one made
        (``%chaz undo``: an Ack whose ``undo_of`` names the call, server/kernel/undo.py; its
        ``agent`` is who undid it, ``tool_call_id`` the call undone)."""
        t = self.text
        undo_column = f", {t('e.payload', 'undo_of')} AS undo_of"
        undo_rows = (f"\n   OR (e.entry_type = 'Ack' AND e.tool_name = 'kernel__run'"
                     f" AND {t('e.payload', 'undo_of')} IS NOT NULL)")
        return f"""
CREATE OR REPLACE VIEW variable_changes AS
SELECT e.session_id, e.sender AS agent, e.run_id, e.tool_call_id,
       {t('c.value', 'name')} AS variable,
       {t('c.value', 'change')} AS change,
       {t('c.value', 'type')} AS type,
       {t('c.value', 'shape')} AS shape,
       {t('c.value', 'fingerprint')} AS fingerprint,
       e.created_at, e.id AS result_entry_id{copied_column('e', forks)}{undo_column}
FROM entries e, {self.each(self.json('e.payload', 'namespace_changes'), 'c')}
WHERE (e.entry_type = 'ToolResult' AND e.tool_name = 'kernel__run'){undo_rows}
"""

    def approvals(self, forks: bool = True, authors: bool = False) -> str:
        t, j, cast = self.text, self.json, self.try_cast
        # Decisions that the approval book ignored (an agent's, or a second one) carry an
        # Error entry pointing at them; the view leaves them out.
        ignored = (
            f"SELECT {cast(t('payload', 'ignored_entry'), 'BIGINT')} AS id FROM entries"
            f" WHERE entry_type = 'Error' AND {j('payload', 'ignored_entry')} IS NOT NULL"
        )
        return f"""
CREATE OR REPLACE VIEW approvals AS
WITH requests AS (
    SELECT e.id AS entry_id, e.session_id, e.seq,
           {t('e.payload', 'request_id')} AS request_id,
           coalesce({t('e.payload', 'agent')}, e.sender) AS agent,
           e.run_id,
           e.tool_call_id,
           {t('e.payload', 'tool_name')} AS tool_name,
           {t('e.payload', 'risk_level')} AS risk_level,
           {j('e.payload', 'arguments_display')} AS arguments_display,
           {cast(t('e.payload', 'timeout_secs'), 'DOUBLE')} AS timeout_secs,
           e.created_at AS requested_at{copied_column('e', forks)}
    FROM entries e WHERE e.entry_type = 'ApprovalRequest'
),
decisions AS (
    SELECT d.id, {t('d.payload', 'request_id')} AS request_id,
           {t('d.payload', 'decision')} AS decision,
           coalesce({t('d.payload', 'decided_by')}, d.sender) AS decided_by,
           {t('d.payload', 'reason')} AS reason,
           d.created_at AS decided_at,
           {cast(t('d.payload', 'edited'), 'BOOLEAN')} AS edited,
           {j('d.payload', 'arguments')} AS edited_arguments{author_column(self, 'd', authors)}
    FROM entries d
    WHERE d.entry_type = 'ApprovalDecision'
      AND d.id NOT IN (SELECT id FROM ({ignored}) i WHERE id IS NOT NULL)
),
effective AS (
    -- timed_out wins over any other decision; otherwise the first in entry order
    SELECT * FROM (
        SELECT *, row_number() OVER (
            PARTITION BY request_id ORDER BY (decision = 'timed_out') DESC, id) AS rank
        FROM decisions) ranked
    WHERE rank = 1
)
SELECT r.request_id, r.session_id, r.agent, r.run_id, r.tool_call_id, r.tool_name, r.risk_level,
       r.arguments_display, r.timeout_secs, r.requested_at,
       coalesce(d.decision, 'pending') AS decision, d.decided_by, d.reason, d.decided_at,
       CASE WHEN d.decided_at IS NULL THEN NULL
            ELSE {self.ms_between('r.requested_at', 'd.decided_at')} END AS wait_ms,
       r.entry_id,
       -- approved with edits: the tool ran with edited_arguments (arguments_display: as asked)
       coalesce(d.edited, false) AS edited, d.edited_arguments{copied_column('r', forks)}{
           ", d.author AS decided_as" if authors else ""}
FROM requests r LEFT JOIN effective d ON d.request_id = r.request_id
"""

    def tool_calls(self, forks: bool = True) -> str:
        t, j, cast = self.text, self.json, self.try_cast
        return f"""
CREATE OR REPLACE VIEW tool_calls AS
WITH calls AS (
    SELECT id, session_id, sender AS agent, run_id, tool_call_id, tool_name,
           {j('payload', 'arguments')} AS arguments,
           {t('payload', 'mcp_server')} AS mcp_server, created_at{copied_column('entries', forks)}
    FROM entries WHERE entry_type = 'ToolCall'
),
results AS (
    SELECT id, session_id, run_id, tool_call_id,
           {t('payload', 'output')} AS output,
           coalesce({cast(t('payload', 'is_error'), 'BOOLEAN')}, false) AS is_error,
           {cast(t('payload', 'duration_ms'), 'DOUBLE')} AS total_ms,
           coalesce({cast(t('payload', 'approval_wait_ms'), 'DOUBLE')}, 0) AS wait_ms,
           {t('payload', 'approval')} AS approval,
           {t('payload', 'decided_by')} AS decided_by,
           {cast(t('payload', 'edited'), 'BOOLEAN')} AS edited,
           {j('payload', 'arguments')} AS edited_arguments,
           {t('payload', 'code_sha256')} AS code_sha256,
           created_at
    FROM entries WHERE entry_type = 'ToolResult'
)
SELECT c.session_id, c.agent, c.run_id, c.tool_call_id, c.tool_name AS tool,
       -- what the tool ran with: the person's edit when they approved one (proposed_arguments:
       -- the model's)
       CASE WHEN r.edited THEN r.edited_arguments ELSE c.arguments END AS arguments,
       r.output, r.is_error,
       c.created_at AS started_at, r.created_at AS finished_at,
       -- time in the tool itself; the wait for a person is in the approvals view
       greatest(r.total_ms - r.wait_ms, 0) AS duration_ms,
       coalesce(r.approval, 'none') AS approval, r.decided_by,
       c.id AS call_entry_id, r.id AS result_entry_id,
       c.mcp_server,  -- the MCP server of the tool; NULL for Python tools
       -- a person edited the arguments before approving: the tool ran with edited_arguments
       coalesce(r.edited, false) AS edited, CASE WHEN r.edited THEN r.edited_arguments END AS edited_arguments,
       c.arguments AS proposed_arguments,
       -- a code call that ran (kernel__run): the sha256 of the exact code, whose text the
       -- log keeps with its secret literals masked
       r.code_sha256{copied_column('c', forks)}
FROM calls c
LEFT JOIN results r
  ON r.session_id = c.session_id AND r.run_id IS NOT DISTINCT FROM c.run_id AND r.tool_call_id = c.tool_call_id
"""

    def runs(self, forks: bool = True, authors: bool = False) -> str:
        cast = self.try_cast
        ack = ("trigger_id", "trigger_type", "schedule_id", "model", "parent_run", "answers_count")
        end = ("steps", "prompt_tokens", "completion_tokens", "cost_usd", "interrupted", "status")

        def a(key: str) -> str:
            return self.field("f", ack, key)

        def e(key: str) -> str:
            return self.field("e.f", end, key)

        # the session's source when it is a fork (a copied run has its copy's ids), and the
        # source's run a fork's copy copies
        fork_column = ",\n       fs.forked_from, a.copied_from" if forks else ""
        copy_column = ", a.copied_from" if forks else ""
        fork_join = "\nLEFT JOIN sessions fs ON fs.id = a.session_id" if forks else ""

        return f"""
CREATE OR REPLACE VIEW runs AS
WITH acks AS (
    -- a run's opening Ack is the run (its id is the run id); one JSON parse for its fields
    SELECT run_id, session_id, agent, started_at{copy_column.replace('a.', '')}{", author" if authors else ""},
           {cast(a('trigger_id'), 'BIGINT')} AS trigger_entry_id, {a('trigger_type')} AS trigger_kind,
           {a('schedule_id')} AS schedule_id, {a('model')} AS model,
           {cast(a('parent_run'), 'BIGINT')} AS parent_run, {cast(a('answers_count'), 'INTEGER')} AS answers
    FROM (
        SELECT a.id AS run_id, a.session_id, a.sender AS agent, a.created_at AS started_at{copy_column}{
               author_column(self, 'a', authors)},
               {self.fields('a.payload', ack, 'f')}
        FROM entries a
        WHERE a.entry_type = 'Ack' AND a.run_id = a.id) opening
),
ends AS (
    -- the first Message, Error or closing Ack of the run (the opening Ack is the run itself)
    SELECT * FROM (
        SELECT run_id, entry_type, created_at,
               {self.fields('payload', end, 'f')},
               row_number() OVER (PARTITION BY run_id ORDER BY id) AS rank
        FROM entries
        WHERE entry_type IN ('Message', 'Error', 'Ack') AND run_id IS NOT NULL AND run_id <> id) ranked
    WHERE rank = 1
),
steps_seen AS (
    SELECT run_id, count(*) AS tool_calls FROM entries WHERE entry_type = 'ToolCall' GROUP BY 1
),
unfinished AS (
    SELECT a.run_id FROM acks a WHERE a.run_id NOT IN (SELECT run_id FROM ends)
),
open_requests AS (
    -- only runs with no end can be parked; decisions carry the request's run and tool call
    SELECT DISTINCT r.run_id FROM entries r
    WHERE r.entry_type = 'ApprovalRequest' AND r.run_id IN (SELECT run_id FROM unfinished)
      AND NOT EXISTS (
        SELECT 1 FROM entries d WHERE d.entry_type = 'ApprovalDecision'
          AND d.run_id = r.run_id AND d.tool_call_id = r.tool_call_id)
)
SELECT a.session_id, a.agent, a.run_id,
       a.trigger_entry_id,
       a.trigger_kind AS trigger_type,
       a.schedule_id,
       a.started_at, e.created_at AS finished_at,
       CASE WHEN e.run_id IS NULL AND o.run_id IS NOT NULL THEN 'parked'
            WHEN e.run_id IS NULL THEN 'running'
            WHEN e.entry_type = 'Error' AND {e('interrupted')} = 'true' THEN 'interrupted'
            WHEN e.entry_type = 'Error' THEN 'error'
            -- stopped by a person (%chaz stop, a Stop button): a closing Ack, not an error
            WHEN e.entry_type = 'Ack' AND {e('status')} = 'cancelled' THEN 'cancelled'
            -- open when its session was forked: closed in the branch (core/forksql.py)
            WHEN e.entry_type = 'Ack' AND {e('status')} = 'forked' THEN 'forked'
            ELSE 'ok' END AS status,
       {cast(e('steps'), 'INTEGER')} AS steps,
       coalesce(s.tool_calls, 0) AS tool_calls,
       {cast(e('prompt_tokens'), 'BIGINT')} AS prompt_tokens,
       {cast(e('completion_tokens'), 'BIGINT')} AS completion_tokens,
       {cast(e('cost_usd'), 'DOUBLE')} AS cost_usd,
       CASE WHEN e.created_at IS NULL THEN NULL
            ELSE {self.ms_between('a.started_at', 'e.created_at')} END AS latency_ms,
       a.model, a.parent_run,
       -- Messages/Directives the run answers together (a burst coalesced into one run);
       -- runs recorded before the Ack had the field answered their one trigger
       coalesce(a.answers, CASE WHEN a.trigger_entry_id IS NULL THEN 0 ELSE 1 END) AS answers{fork_column}{
           ", a.author" if authors else ""}
FROM acks a{fork_join}
LEFT JOIN ends e ON e.run_id = a.run_id
LEFT JOIN steps_seen s ON s.run_id = a.run_id
LEFT JOIN open_requests o ON o.run_id = a.run_id
"""

    def branches(self) -> str:
        """Every fork: its point, its agent and model, and the totals of each branch from the
        fork point on: the branch's own runs; the source's runs with an entry after the point
        (one open at the point goes on in the source), their tool calls made after it."""
        d = self.double

        def totals(prefix: str, calls: str = "sum(o.tool_calls)") -> str:
            return (f"count(o.run_id) AS {prefix}runs, CAST(coalesce(sum(o.steps), 0) AS BIGINT) AS {prefix}steps, "
                    f"CAST(coalesce({calls}, 0) AS BIGINT) AS {prefix}tool_calls, "
                    f"CAST(sum(o.prompt_tokens) AS BIGINT) AS {prefix}prompt_tokens, "
                    f"CAST(sum(o.completion_tokens) AS BIGINT) AS {prefix}completion_tokens, "
                    f"CAST(sum(o.cost_usd) AS {d}) AS {prefix}cost_usd, "
                    f"CAST(sum(o.latency_ms) AS {d}) AS {prefix}duration_ms, min(o.model) AS {prefix}model")

        return f"""
CREATE OR REPLACE VIEW branches AS
WITH own AS (
    -- the runs a session ran itself (not the copies a fork made of its source's)
    SELECT r.session_id, r.run_id, a.seq, r.model, r.steps, r.tool_calls, r.prompt_tokens,
           r.completion_tokens, r.cost_usd, r.latency_ms
    FROM runs r JOIN entries a ON a.id = r.run_id
    WHERE a.copied_from IS NULL
),
forks AS (
    SELECT f.id, f.agent, f.forked_from, f.forked_at_seq, f.created_at, s.agent AS source_agent
    FROM sessions f LEFT JOIN sessions s ON s.id = f.forked_from
    WHERE f.forked_from IS NOT NULL
),
source_runs AS (
    -- per fork, the source's runs with an entry after the point, and their calls after it
    SELECT f.id AS fork_id, x.run_id,
           count(CASE WHEN x.entry_type = 'ToolCall' THEN 1 END) AS calls_after
    FROM forks f JOIN entries x ON x.session_id = f.forked_from AND x.seq > f.forked_at_seq
    WHERE x.run_id IS NOT NULL
    GROUP BY f.id, x.run_id
),
branch AS (
    SELECT f.id, {totals('')} FROM forks f LEFT JOIN own o ON o.session_id = f.id GROUP BY f.id
),
source AS (
    SELECT f.id, {totals('source_', 'sum(CASE WHEN o.run_id IS NOT NULL THEN sr.calls_after END)')} FROM forks f
    LEFT JOIN source_runs sr ON sr.fork_id = f.id
    LEFT JOIN own o ON o.session_id = f.forked_from AND o.run_id = sr.run_id GROUP BY f.id
)
SELECT f.id AS session_id, f.forked_from, f.forked_at_seq, f.created_at AS forked_at,
       f.agent, b.model, b.runs, b.steps, b.tool_calls, b.prompt_tokens, b.completion_tokens,
       b.cost_usd, b.duration_ms,
       f.source_agent, s.source_model, s.source_runs, s.source_steps, s.source_tool_calls,
       s.source_prompt_tokens, s.source_completion_tokens, s.source_cost_usd, s.source_duration_ms
FROM forks f JOIN branch b ON b.id = f.id JOIN source s ON s.id = f.id
"""


class PostgresDialect(Dialect):
    """PostgreSQL: ``->>``/``->``, the ``chaz_try_*`` functions of core/store/migrations.py, epoch
    arithmetic; a JSON value is kept whole and read with ``->>`` (no multi-path extract)."""

    name = "postgresql"
    double = "DOUBLE PRECISION"
    _TRY = {"BIGINT": "chaz_try_bigint({})", "INTEGER": "chaz_try_bigint({})::integer",
            "DOUBLE": "chaz_try_double({})", "BOOLEAN": "chaz_try_bool({})"}

    def text(self, obj: str, key: str) -> str:
        return f"{obj}->>'{key}'"

    def json(self, obj: str, key: str) -> str:
        return f"{obj}->'{key}'"

    def try_cast(self, expr: str, sql_type: str) -> str:
        return self._TRY[sql_type].format(expr)

    def ms_between(self, start: str, end: str) -> str:
        return f"extract(epoch FROM ({end} - {start}))::double precision * 1000.0"

    def text_at(self, obj: str, *keys: str) -> str:
        return obj + "".join(f"->'{k}'" for k in keys[:-1]) + f"->>'{keys[-1]}'"

    def json_at(self, obj: str, *keys: str) -> str:
        return obj + "".join(f"->'{k}'" for k in keys)

    def each(self, array: str, alias: str) -> str:
        # a JSON null or a non-array yields no rows rather than an error
        return (f"LATERAL json_array_elements(CASE WHEN json_typeof({array}) = 'array' THEN {array} "
                f"ELSE '[]'::json END) AS {alias}(value)")

    def fields(self, obj: str, keys: Sequence[str], alias: str) -> str:
        return f"{obj} AS {alias}"

    def author(self, table: str) -> str:
        return f"{table}.author"  # the role that wrote it (its column's default: session_user)

    def field(self, alias: str, keys: Sequence[str], key: str) -> str:
        return f"({alias}->>'{key}')"


def messages_view(forks: bool = True, dialect: Dialect | None = None, authors: bool = False) -> str:
    fork_column = ", s.forked_from, e.copied_from" if forks else ""
    if dialect is not None:
        fork_column += author_column(dialect, "e", authors)
    return f"""
CREATE OR REPLACE VIEW messages AS
SELECT e.session_id, s.agent AS session_agent, s.kind AS session_kind, e.seq, e.entry_type,
       e.sender, e.content, e.created_at, e.id AS entry_id{fork_column}
FROM entries e JOIN sessions s ON s.id = e.session_id
WHERE e.entry_type IN ('Message', 'Directive', 'Summary')
"""


MESSAGES_VIEW = messages_view()

DUCKDB = Dialect()
POSTGRES = PostgresDialect()
