"""An MCP server that never answers ``initialize``: it reads its stdin and says nothing.

It ends when its stdin closes (the client gone) or when it is terminated.
"""

import sys

print("starting up, slowly", file=sys.stderr, flush=True)
for _line in sys.stdin:
    pass
