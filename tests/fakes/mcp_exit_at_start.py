"""An MCP server that crashes at start: one line on stderr, exit status 3, nothing on stdout."""

import sys

print("fatal: cannot open the widget database", file=sys.stderr, flush=True)
sys.exit(3)
