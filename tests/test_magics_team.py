"""``%chaz whoami`` / ``share`` / ``unshare`` on one person's DuckDB store (no roles) and their
bad lines: each a one-line error saying what to do. The PostgreSQL team side: test_pgteam.py
and test_pg_team_kernels.py."""

from __future__ import annotations

import pytest

from ipython_harness import ip, one_line_error


def test_whoami_on_a_duckdb_store_says_it_has_no_roles(chaz, capsys):
    capsys.readouterr()
    ip.run_line_magic("chaz", "whoami")
    out = capsys.readouterr().out
    assert "one person's DuckDB file (no roles to act as)" in out


@pytest.mark.parametrize(("line", "needle"), [
    ("whoami bob", "takes no arguments"),
    ("share", "takes one SESSION and one or more @ROLE"),
    ("share 1", "takes one SESSION and one or more @ROLE"),
    ("share 1 @bob --admin", "--admin is not one level"),
    ("share 1 @bob --read --write", "is not one level"),
    ("share 1 @", "@ needs a role's name"),
    ("unshare 1 @bob --read", "is not one level"),
    ("share 99 @bob", "there is no session 99"),
])
def test_bad_team_lines_are_one_line_errors(chaz, capsys, line, needle):
    one_line_error(capsys, f"%chaz {line}", needle)


def test_sharing_on_duckdb_says_it_needs_postgresql(chaz, capsys):
    sid = chaz.new_session("assistant")
    one_line_error(capsys, f"%chaz share {sid} @bob --write", "sharing needs a PostgreSQL store")
