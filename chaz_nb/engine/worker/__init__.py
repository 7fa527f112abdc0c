"""Model calls in a worker process: ``WorkerBackend`` (client.py) in the kernel, litellm in the
worker (main.py), plain-dict frames between them (protocol.py)."""

from .client import WorkerBackend, shared_backend

__all__ = ["WorkerBackend", "shared_backend"]
