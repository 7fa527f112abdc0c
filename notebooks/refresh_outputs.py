"""Re-execute the example notebooks in place (nbclient), as a frontend would save them.

    /work/venv/bin/python notebooks/refresh_outputs.py [NOTEBOOK ...]

Run it after a change that alters what the notebooks show, then check with
``pytest --nbval notebooks/``. Widget state is not saved: a finished ``%chaz`` view is static.
"""

from __future__ import annotations

import glob
import os
import sys

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))


def refresh(path: str) -> None:
    nb = nbformat.read(path, as_version=4)
    env_db = os.environ.pop("CHAZ_DB", None)
    try:
        NotebookClient(
            nb,
            timeout=300,
            kernel_name="python3",
            resources={"metadata": {"path": os.path.dirname(os.path.abspath(path))}},
            store_widget_state=False,
        ).execute()
    finally:
        if env_db is not None:
            os.environ["CHAZ_DB"] = env_db
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)
    print(f"refreshed {os.path.relpath(path)}")


if __name__ == "__main__":
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.pop("CHAZ_MODEL", None)
    examples = [p for p in glob.glob(os.path.join(HERE, "*.ipynb")) if not p.endswith(".out.ipynb")]
    for nb_path in sys.argv[1:] or sorted(examples):  # not the copies run_notebook.py leaves
        refresh(nb_path)
