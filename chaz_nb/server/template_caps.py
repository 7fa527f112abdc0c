"""Whether a local model server's chat template puts the tools it is sent into the prompt.

llama.cpp's ``llama-server`` takes a request's ``tools`` with any template, yet a template
without a tool section (SmolLM2-135M's, with or without ``--jinja``) leaves them out of the
prompt: the model never sees them and answers as if it had none. The server says so itself:
``GET /props`` (at the server's root, beside ``/v1``) holds ``chat_template_caps`` with
``supports_tools``. Asked once per server root, with no key and no body (nothing of the
notebook leaves), off the loop; anything but a clear ``false`` (another server, a 404, no
answer within the timeout) is "unknown" and says nothing.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

#: seconds the server has to answer ``/props`` (a local server answers in milliseconds)
PROBE_TIMEOUT = 2.0
#: the most of ``/props`` read (llama.cpp's holds its whole chat template: kilobytes)
_MAX_BYTES = 1 << 20


def server_root(api_base: str) -> str | None:
    """``scheme://host:port`` of an ``http(s)`` base URL (``/v1`` and any path dropped), or None."""
    parts = urllib.parse.urlsplit(api_base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"  # never the URL's user:password@


def template_takes_tools(api_base: str, timeout: float = PROBE_TIMEOUT) -> bool | None:
    """False when the server at ``api_base`` says its chat template takes no tools; True when
    it says it does; None when it says nothing we understand. Blocking: call off the loop."""
    root = server_root(api_base)
    if root is None:
        return None
    request = urllib.request.Request(f"{root}/props", headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (http(s) only, above)
            body = json.loads(response.read(_MAX_BYTES))
    except (urllib.error.URLError, OSError, ValueError):
        return None
    caps = body.get("chat_template_caps") if isinstance(body, dict) else None
    if not isinstance(caps, dict) or not isinstance(caps.get("supports_tools"), bool):
        return None
    return bool(caps["supports_tools"])
