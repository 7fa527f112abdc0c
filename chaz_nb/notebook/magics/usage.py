"""The usage and help text of ``%chaz``, built from the sub-commands' parsers so none falls behind."""

from __future__ import annotations

import textwrap

from .approvals import APPROVE_USAGE, DENY_USAGE, PENDING_USAGE
from .cells import CELLS_USAGE, EXPORT_USAGE
from .args import CommandParser, usage_of
from ..views.session import DEFAULT_PAGE as DEFAULT_LOG_LIMIT
from .fork import COMPARE_USAGE, FORK_USAGE, REPLAY_USAGE
from .mcp import MCP_USAGE
from .multi import ROOM_USAGE, SCHEDULE_USAGE
from .sql import AUDIT_USAGE, SQL_USAGE
from .stop import STOP_USAGE
from .undo import UNDO_USAGE
from .team import SHARE_USAGE, UNSHARE_USAGE

USE_USAGE = "usage: %chaz use SESSION"
CELL_USAGE = (
    "usage: %%chaz @NAME [--no-wait] | %%chaz directive @NAME | %%chaz agent NAME (TOML body) "
    "| %%chaz sql [options] (SQL body) | %%chaz mcp NAME (TOML body) "
    "| %%chaz approve ID [--code] (edited arguments as JSON, or the code, as body)"
)

_HELP = """\
%chaz @NAME text            send a Message to NAME's current session and wait for the reply
%chaz --no-wait @NAME text  send and return at once (the run goes on; see %chaz wait)
%chaz @NAME --with a,b text attach the variables' descriptions (under NAME's data policy) to the Message
%chaz directive @NAME text  write a Directive (a task) instead of a Message
%%chaz @NAME                the cell body is the message
{agent}
                            without --tools: the built-in session tools and the kernel's (kernel__*, kernel__run
                            asks first), not your own tools; --tools '*' gives every tool
                            --data schema|sample|full, --data-rows N: what the kernel's tools send of your data
                            --egress ask|allow|deny, --egress-host HOST: whether it may leave (ask: a card)
%%chaz agent NAME           the same fields as a TOML body (model = "...", tools = ["a", "b"], ...)
%chaz agents                the agents here: where each comes from, the tools they name not defined yet
%chaz agent NAME --forget   remove NAME from this kernel and the store (agents are kept with the sessions)
%chaz agent NAME --accept   take the definition another kernel stored for NAME (until then its runs here keep
                            this kernel's tools, auto-approve list and api_base)
%chaz sessions              the sessions in the database
%chaz log [SESSION] [--limit N] [--before SEQ] [--all]
                            a session's transcript (SESSION: an id or @NAME; default: the last one):
                            its newest 50 entries (--limit N), those before seq SEQ, or --all of them
%chaz new @NAME             start a fresh session with NAME
%chaz use SESSION           make SESSION its agent's current one here (e.g. one another kernel serves)
%chaz wait [SESSION]        wait for a session's run to finish
%chaz stop [SESSION|all]    stop a run (and its spawned children): tools cancelled, approvals closed, Ack cancelled
%chaz whoami                who this kernel acts as (the PostgreSQL role it logged in as) and what it sees
%chaz share SESSION @ROLE|@GROUP [--read|--write|--approve]
                            a team's store: let another person read / also post and stop / also decide approvals
%chaz unshare SESSION @ROLE take a share back
%chaz cells [SESSION]       the session's approved kernel__run code as cells (one: a new cell below; more: printed)
%chaz cells off|on          approved agent code as a cell below the cell that asked (lab extension), for this kernel
%chaz export [SESSION] --notebook PATH [--force]
                            a new notebook: the session's messages as markdown, its approved code as cells
%chaz pending               tool calls waiting for your approval
%chaz approve ID|last|all   approve (--all-calls: every call to that tool in the session)
%chaz approve ID --args JSON   approve with edited arguments (checked against the tool's schema)
%chaz approve ID --edit     a new cell below holds the arguments (a code call's code) to edit and run
%chaz deny ID|last [--reason TEXT...]   deny; the agent is told, with the reason (the rest of the line)
%chaz sql [-o NAME] QUERY   read-only SQL on the session database (views: tool_calls, runs, approvals, messages)
%%chaz sql [-o NAME [--relation]] [--db PATH] [--max-rows N]   the cell body is the query
%chaz audit [SESSION]       a live table of tool calls with filters and totals
%chaz schedule add @NAME "CRON|every 30s|at ISO|in 10m" prompt... [--fresh|--session ID] [--max-fires N]
                            wake NAME with the prompt on a trigger (cron: UTC, 5 fields or 6 with seconds)
%chaz schedule list|pause ID|resume ID|remove ID   the schedules (kept in the database)
%chaz room NAME @a @b [--host a] [--budget N]   a session shared by agents; it becomes the current room:
                            %chaz @a text then speaks there, and the agents @mentioned take turns
%chaz room [NAME]           list the rooms / enter room NAME;  %chaz room --leave  leaves the current room
%chaz fork SESSION [--at SEQ] [--agent NAME] [--model M] [--system TEXT] [--api-base URL] [--say TEXT] [--rerun]
      [--replay recorded|live]   a new session starting with SESSION's log up to SEQ (another model, prompt, message)
%chaz replay SESSION --model M [--agent NAME] [--system TEXT] [--api-base URL]
                            every trigger of SESSION again in a new branch; tools from the recording
%chaz compare A B           two branches side by side from their fork point
%chaz undo [TOOL_CALL] [--session SESSION] [--partial] [--force]
                            put back the variables an agent's kernel__run call (default: the session's last)
                            created, rebound or deleted; what it cannot undo (changed in place, a file written,
                            a network call, an import) is named first and stops it unless --partial;
                            --release frees the before-state kept for the session's last calls
%chaz compact [SESSION]     summarize the conversation into a Summary: later runs start from it
%chaz mcp add NAME -- COMMAND ARGS...   start an MCP tool server (or --url URL); its tools are NAME__TOOL
                            options: --env K=V --risk R --approval MODE --timeout S --start-timeout S --wait
%chaz mcp list | mcp remove NAME   the MCP servers (state, tools, why one failed) / stop one
%%chaz mcp NAME             the same options as TOML (command = ["python", "-m", "mcp_server_time"])
%chaz config [db=PATH] [model=M]   show or change the database / the default agent's model
await chaz_nb.ask("@NAME text")    the async form; returns the reply entry
Tools: decorate a function with @chaz_nb.tool and list its name in --tools.
Interrupting a wait stops waiting only: the run goes on and every entry is kept."""


# ------------------------------------------------------------------ parsing
def agent_parser() -> CommandParser:
    p = CommandParser(prog="agent")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--model", metavar="M")
    p.add_argument("--system", metavar="S")
    p.add_argument("--tools", metavar="a,b",
                   help="comma-separated tool names (from this notebook) or globs; default: the session tools and "
                        "the kernel's (kernel__*), not your own; '*': every tool")
    p.add_argument("--auto-approve", dest="auto_approve", metavar="a,b",
                   help="comma-separated tools (or globs) this agent may call without asking")
    p.add_argument("--approval-timeout", type=float, dest="approval_timeout", metavar="S",
                   help="seconds an approval request waits before it is denied")
    p.add_argument("--max-depth", type=int, dest="max_depth", metavar="N")
    p.add_argument("--max-iterations", type=int, dest="max_iterations", metavar="N")
    p.add_argument("--max-spawns", type=int, dest="max_spawns", metavar="N",
                   help="spawns in the whole run tree this agent starts (default 50)")
    p.add_argument("--max-model-calls", type=int, dest="max_model_calls", metavar="N",
                   help="model calls in the whole run tree this agent starts (default 500)")
    p.add_argument("--context-tokens", type=int, dest="context_tokens", metavar="N",
                   help="token budget of a run's context, newest first from the latest Summary (default 32000)")
    p.add_argument("--max-tool-output", type=int, dest="max_tool_output", metavar="N",
                   help="characters of one tool result the model is sent; the log keeps it whole (default 50000)")
    p.add_argument("--data", choices=("schema", "sample", "full"),
                   help="what the kernel's tools send of the notebook's values (default sample)")
    p.add_argument("--data-rows", type=int, dest="data_rows", metavar="N",
                   help="rows the sample policy sends of a frame or query result (default 10)")
    p.add_argument("--egress", choices=("ask", "allow", "deny"),
                   help="whether the notebook's data may leave for the model's host: "
                        "ask (a card, default), allow, deny")
    p.add_argument("--egress-host", dest="egress_hosts", action="append", metavar="HOST",
                   help="a host always sent to (repeat it); naming hosts replaces the default "
                        "127.0.0.1, localhost, ::1")
    p.add_argument("--code-timeout", type=float, dest="code_timeout", metavar="S",
                   help="seconds kernel__run code may run before it is interrupted (default 60)")
    p.add_argument("--script", metavar="JSON", help="JSON list of steps for the chaz/script model")
    p.add_argument("--api-base", dest="api_base", metavar="URL",
                   help="the model server's URL (keys come from the environment)")
    p.add_argument("--model-timeout", type=float, dest="model_timeout", metavar="S",
                   help="seconds one model call may take (default 600)")
    p.add_argument("--max-retries", type=int, dest="max_retries", metavar="N",
                   help="retries of a rate-limited, failed or dropped model call (default 2)")
    p.add_argument("--no-stream", dest="stream", action="store_const", const=False, default=None,
                   help="ask the model for whole replies (default: stream, the view shows the reply as it is written)")
    p.add_argument("--no-cells", dest="cells", action="store_const", const=False, default=None,
                   help="its approved kernel__run code does not become notebook cells (alone: changes only that)")
    p.add_argument("--cells", dest="cells", action="store_const", const=True,
                   help="its approved kernel__run code becomes a cell below the cell that asked (the default)")
    p.add_argument("--forget", action="store_true",
                   help="remove NAME from this kernel and the store (its sessions stay)")
    p.add_argument("--accept", action="store_true",
                   help="take the definition another kernel stored for NAME (its tools, auto-approve, api_base)")
    p.usage = "%chaz " + usage_of(p)
    return p


def log_parser() -> CommandParser:
    p = CommandParser(prog="log")
    p.add_argument("session", nargs="?", default="", metavar="SESSION")
    p.add_argument("--limit", metavar="N", help=f"entries to show (default {DEFAULT_LOG_LIMIT}): the newest ones")
    p.add_argument("--before", metavar="SEQ", help="show the entries before seq SEQ")
    p.add_argument("--all", action="store_true", help="the whole log")
    p.usage = "%chaz " + usage_of(p)
    return p


def export_parser() -> CommandParser:
    p = CommandParser(prog="export")
    p.add_argument("session", nargs="?", default="", metavar="SESSION")
    p.add_argument("--notebook", metavar="PATH", help="the .ipynb file to write (a new one)")
    p.add_argument("--force", action="store_true", help="replace PATH if it exists")
    p.usage = EXPORT_USAGE
    return p


def _forms(usage: str) -> str:
    return usage[len("usage: %chaz "):]


AGENT_FORM = usage_of(agent_parser())
#: the full usage: each sub-command's own usage text, so none can fall behind its parser
USAGE = "usage: %chaz " + " | ".join(
    [
        "@NAME text",
        "--no-wait @NAME text",
        "directive @NAME text",
        AGENT_FORM,
        "agents",
        "sessions",
        usage_of(log_parser()),
        "new @NAME",
        _forms(USE_USAGE),
        "wait [SESSION]",
        _forms(STOP_USAGE),
        "whoami",
        _forms(SHARE_USAGE),
        _forms(UNSHARE_USAGE),
        _forms(CELLS_USAGE),
        _forms(EXPORT_USAGE),
        _forms(PENDING_USAGE),
        _forms(APPROVE_USAGE),
        _forms(DENY_USAGE),
        _forms(SQL_USAGE),
        _forms(MCP_USAGE),
        _forms(AUDIT_USAGE),
        _forms(SCHEDULE_USAGE),
        _forms(ROOM_USAGE),
        _forms(FORK_USAGE),
        _forms(REPLAY_USAGE),
        _forms(COMPARE_USAGE),
        _forms(UNDO_USAGE),
        "compact [SESSION]",
        "config [db=PATH] [model=M]",
        "help",
    ]
)
#: what bare ``%chaz`` prints (normal output, not an error): the common forms and where the rest is
SHORT_USAGE = """\
%chaz @NAME text                   talk to an agent (the built-in one: @assistant)
%chaz agent NAME --model M         define an agent (%%chaz agent NAME: the fields as a TOML body)
%chaz log | sessions | pending | stop | undo | sql | audit | fork | compare | config ...
%chaz help                         every sub-command and flag"""
HELP = _HELP.replace(
    "{agent}",
    # never cut a flag at its hyphen ("--model-" / "timeout")
    textwrap.fill(AGENT_FORM, width=100, initial_indent="%chaz ", subsequent_indent=" " * 28,
                  break_on_hyphens=False, break_long_words=False),
)

