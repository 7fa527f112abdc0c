"""Credentials told by what they hold, not only by their name (issue 41 §5).

A kept agent's options are stored and shown; a name check (``api_key``, ``*_token``, headers)
misses a credential under any other name: ``vertex_credentials`` (a service account's JSON with
its private key), ``api_base`` with ``user:password@``, a ``client_secret`` nested in a table.
``credential_in`` looks at the value instead, at every depth:

- a PEM private-key block (``-----BEGIN ... PRIVATE KEY-----``);
- userinfo in a URL (``https://user:password@host``, ``https://token@host``);
- a JSON credential: an object (or JSON text of one) with a field such as ``private_key``,
  ``client_secret``, ``refresh_token``, ``password`` or a credential header name;
- what the store's redaction masks: a bearer token, an ``Authorization`` value, a provider key
  shape (``sk-...``), and the values of this kernel's key variables.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Callable, Mapping

from .redaction import is_credential_field, is_secret_name, redact

#: a PEM block that holds a private key (RSA, EC, OpenSSH, PKCS#8, encrypted)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----")
#: the whole block (to its END line, or to the end of the text when it has none)
_PRIVATE_KEY_BLOCK = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*-----|\Z)",
                                re.DOTALL)
#: the userinfo of a URL, to mask it (keeps the scheme and the host)
_USERINFO_PART = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s?#@]+@")
#: ``scheme://userinfo@``: a URL that carries a credential before its host
_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^/\s?#@]+@")
#: fields of a JSON credential (a service account, an OAuth client or token, a login)
CREDENTIAL_KEYS = frozenset({
    "private_key", "private_key_id", "client_secret", "refresh_token", "access_token", "id_token",
    "password", "passwd", "secret", "secret_key", "client_key", "session_token", "auth_token", "token",
    "credentials", "api_secret",
})


def is_credential_key(name: str) -> bool:
    """Whether a field called ``name`` holds a credential (``client_secret``, ``x-api-key``)."""
    lowered = name.strip().lower().replace("-", "_")
    return lowered in CREDENTIAL_KEYS or is_credential_field(name) or is_secret_name(name)


def credential_in(value: object, redact_text: Callable[[str], str] = redact) -> str | None:
    """What credential ``value`` holds, in a few words (``a private key``), or None."""
    if isinstance(value, str):
        return _in_text(value, redact_text)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and is_credential_key(key) and item not in (None, "", {}, []):
                return f"a credential field ({key})"
            found = credential_in(key, redact_text) or credential_in(item, redact_text)
            if found:
                return found
        return None
    if isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            found = credential_in(item, redact_text)
            if found:
                return found
    return None


def _in_text(text: str, redact_text: Callable[[str], str]) -> str | None:
    if _PRIVATE_KEY.search(text):
        return "a private key"
    if _USERINFO.search(text):
        return "a user:password in a URL"
    stripped = text.strip()
    if stripped[:1] in "{[":
        try:
            parsed = json.loads(stripped)
        except ValueError:
            parsed = None
        if isinstance(parsed, (dict, list)):
            found = credential_in(parsed, redact_text)
            if found:
                return found
    if redact_text(text) != text:
        return "a key or token"
    return None


def mask_text(text: str, redact_text: Callable[[str], str] = redact) -> str:
    """``text`` redacted, its private-key blocks and URLs' ``user:password@`` masked too."""
    text = redact_text(text)
    if "PRIVATE KEY" in text:
        text = _PRIVATE_KEY_BLOCK.sub("[REDACTED]", text)
    if "@" in text:
        text = _USERINFO_PART.sub(r"\1[REDACTED]@", text)
    return text


def without_userinfo(url: str) -> tuple[str, bool]:
    """``url`` with its ``user:password@`` dropped, and whether it had one."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return url, False
    if "@" not in parts.netloc:
        return url, False
    host = parts.netloc.rsplit("@", 1)[1]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), True


def masked_url(url: str) -> str:
    """``url`` as shown: ``https://[REDACTED]@host/v1`` for one with userinfo."""
    bare, had = without_userinfo(url)
    if not had:
        return url
    scheme, rest = bare.split("://", 1) if "://" in bare else ("", bare)
    return f"{scheme}://[REDACTED]@{rest}" if scheme else f"[REDACTED]@{rest}"
