"""Test doubles that live on the far side of a real interface (a socket, a process)."""
