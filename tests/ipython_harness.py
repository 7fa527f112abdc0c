"""%chaz through IPython's test shell (globalipapp): the shell and the one-line-error check."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.testing.globalipapp import get_ipython

ip = get_ipython()

#: a cell that defines a tool every call of which waits for a person (a run parks on it)
PARK_TOOL = """
import chaz_nb

@chaz_nb.tool(approval="always")
def wipe(path: str) -> str:
    '''Delete a file.'''
    return f"wiped {path}"
"""


def park_janitor(server) -> int:
    """Define the ``wipe`` tool and a scripted ``janitor`` that calls it, send it a message, and
    return its session id: the run is parked on the wipe call's approval."""
    ip.run_cell(PARK_TOOL).raise_error()
    ip.run_line_magic(
        "chaz",
        "agent janitor --model chaz/script --tools wipe --script "
        "'[{\"tool\": \"wipe\", \"args\": {\"path\": \"/tmp/x\"}}, \"done: {result}\"]'",
    )
    ip.run_line_magic("chaz", "@janitor clean up")  # returns when the run parks
    sid = server.current_session("janitor")
    assert server.session_status(sid) == "parked"
    return sid


def one_line_error(capsys, cell: str, needle: str) -> str:
    """Run a cell that must fail with a one-line UsageError (no traceback)."""
    capsys.readouterr()
    result = ip.run_cell(cell)
    assert isinstance(result.error_in_exec, UsageError), result.error_in_exec
    err = capsys.readouterr().err.strip()
    assert err.startswith("UsageError: "), err
    assert "\n" not in err and "Traceback" not in err, err
    assert needle in err, err
    return err
