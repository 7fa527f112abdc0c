"""``python -m chaz_nb.engine.worker FD``: the model worker process (``main.py``)."""

from .main import main

main()
