import os

# litellm must never fetch its price map from the network during tests.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from chaz_nb.store import SessionStore


@pytest.fixture
def store():
    s = SessionStore(":memory:")
    yield s
    s.close()


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "sessions.duckdb")
