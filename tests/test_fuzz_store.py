"""Property-based: whatever text or JSON arrives, the store writes it faithfully or refuses
it in one line, and never loses or corrupts what was already written."""

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaz_nb.core.entries import EntryType
from chaz_nb.core.redaction import redact
from chaz_nb.core.store import SessionStore, StoreError
from chaz_nb.engine.tools import ToolError, parse_arguments

text = st.text(alphabet=st.characters(codec="utf-8"), max_size=2000) | st.just("\x00 nul \x00") | st.just("x" * 200_000)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False) | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=20), children, max_size=4),
    max_leaves=12,
)

store = SessionStore(":memory:")
session = store.create_session("fuzz")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=text, sender=text, payload=st.dictionaries(st.text(max_size=20), json_values, max_size=5))
def test_any_content_round_trips_or_is_refused_in_one_line(content, sender, payload):
    before = store.latest(session)
    count = store.execute("SELECT count(*) FROM entries")[0][0]
    try:
        written = store.append(session, EntryType.MESSAGE, sender or "user", content, payload=payload)
    except StoreError as exc:
        assert "\n" not in str(exc)
        assert store.latest(session) == before  # nothing half-written
        return
    read = store.entries(session, after_seq=written.seq - 1)
    assert read == [written]
    assert store.execute("SELECT count(*) FROM entries")[0][0] == count + 1
    assert written.content == redact(content)
    assert written.seq == count + 1
    json.dumps(written.payload)  # still JSON


@settings(max_examples=200, deadline=None)
@given(raw=text)
def test_any_tool_argument_text_parses_or_is_a_tool_error(raw):
    try:
        value = parse_arguments(raw)
    except ToolError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(value, dict)
