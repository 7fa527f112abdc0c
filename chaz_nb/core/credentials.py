"""Credentials told by what they hold, not only by their name (issue 41 §5).

A kept agent's options are stored and shown; a name check (``api_key``, ``*_token``, headers)
misses a credential under any other name: ``vertex_credentials`` (a service account's JSON with
its private key), ``api_base`` with ``user:password@``, a ``client_secret`` nested in a table.
``credential_in`` looks at the value instead, at every depth:

- a PEM private-key block (``-----BEGIN ... PRIVATE KEY-----``);
- userinfo in a URL (``https://user:password@host``, ``https://token@host``);
- a JSON credential: an object (or JSON text of one) with a field such as ``private_key``,
  ``client_secret``, ``refresh_token``, ``password`` or a credential header name;
- ``user:password@host`` without a scheme (``admin:pw@db:5432/x``, ``//user:pw@host``);
- a JWT, a Google ``AIza...`` key, a Slack or Discord webhook URL, a ``sig=``/``token=`` query;
- base64 text that decodes to a DER key (an ASN.1 SEQUENCE) or to any of these;
- a list of pairs whose first is a credential field name (``[["client_secret", ...]]``);
- what the store's redaction masks: a bearer token, an ``Authorization`` value, a provider key
  shape (``sk-...``), and the values of this kernel's key variables.
"""

from __future__ import annotations

import base64
import binascii
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
    "credentials", "api_secret", "pass", "pw", "pwd", "passphrase", "sig", "signature",
})
#: ``user:password@host`` without a scheme (``admin:pw@db:5432/x``, ``//user:pw@host``)
_BARE_USERINFO = re.compile(r"(?:^|(?<=[\s\"'=(,]))(?://)?[^\s/?#@:\"']+:[^\s/?#@\"']+@[A-Za-z0-9.\[\]-]+")
#: ``//user@host``: a scheme-relative URL's userinfo
_RELATIVE_USERINFO = re.compile(r"(?:^|(?<=[\s\"'=(,]))//[^\s/?#@]+@[A-Za-z0-9.-]+")
#: a JSON Web Token (header.payload.signature, each base64url; header and payload JSON objects)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
#: keys and secret URLs by their known shape (Google API key, Slack/Discord webhooks, Slack tokens)
_KNOWN = re.compile(r"\bAIza[0-9A-Za-z_-]{30,}|hooks\.slack\.com/services/[A-Za-z0-9/]+|"
                    r"discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_-]+|\bxox[abposr]-[A-Za-z0-9-]{10,}")
#: a URL query parameter that carries a key or a signature (an Azure SAS ``sig=``, ``token=``)
_QUERY_KEY = re.compile(r"(?i)[?&](?:sig|signature|token|access_token|api_key|apikey|key|code|client_secret|"
                        r"x-amz-signature|x-goog-signature|x-amz-security-token)=([^&#\s]{6,})")
#: ``password is X``, ``password: X`` in prose (a system prompt)
#: (a word with a digit or a symbol: "the password is required" is prose, not a password)
_SAID = re.compile(r"(?i)\b((?:password|passwd|passphrase|pwd)\s*(?:is|=|:)\s*[\"']?)"
                   r"(?!\[REDACTED\])(?=[^\s\"',;]*[0-9!#$%^&*+=~|<>?])([^\s\"',;]{4,})")
#: text that may be base64 (a key file or a service account JSON pasted encoded)
_BASE64 = re.compile(r"^[A-Za-z0-9+/_-]{40,}={0,2}$")


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
        items = list(value)
        # a list of pairs is a mapping too ([["client_secret", "..."]])
        if (len(items) == 2 and isinstance(items[0], str) and is_credential_key(items[0])
                and items[1] not in (None, "", {}, [])):
            return f"a credential field ({items[0]})"
        for item in items:
            found = credential_in(item, redact_text)
            if found:
                return found
    return None


def _in_text(text: str, redact_text: Callable[[str], str]) -> str | None:
    if _PRIVATE_KEY.search(text):
        return "a private key"
    if _USERINFO.search(text) or _BARE_USERINFO.search(text) or _RELATIVE_USERINFO.search(text):
        return "a user:password in a URL"
    if _JWT.search(text):
        return "a token (JWT)"
    if _KNOWN.search(text):
        return "a key or secret URL"
    if _QUERY_KEY.search(text):
        return "a key in a URL's query"
    decoded = _base64_credential(text.strip(), redact_text)
    if decoded:
        return decoded
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


def _base64_credential(text: str, redact_text: Callable[[str], str]) -> str | None:
    """What a base64 text holds when decoded: a DER key, a PEM block, a JSON credential."""
    if not _BASE64.match(text):
        return None
    try:
        raw = base64.b64decode(text.replace("-", "+").replace("_", "/") + "=" * (-len(text) % 4))
    except (ValueError, binascii.Error):
        return None
    if len(raw) >= 48 and raw[0] == 0x30 and raw[1] in (0x81, 0x82, 0x83):
        return "a key (DER, base64)"  # an ASN.1 SEQUENCE: a private key or a certificate file
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    found = _in_text(decoded, redact_text)
    return f"{found} (base64)" if found else None


def mask_text(text: str, redact_text: Callable[[str], str] = redact) -> str:
    """``text`` redacted, its private-key blocks and URLs' ``user:password@`` masked too."""
    text = redact_text(text)
    if "PRIVATE KEY" in text:
        text = _PRIVATE_KEY_BLOCK.sub("[REDACTED]", text)
    if "@" in text:
        text = _USERINFO_PART.sub(r"\1[REDACTED]@", text)
        text = _BARE_USERINFO.sub("[REDACTED]@", text)
    text = _JWT.sub("[REDACTED]", text)
    text = _KNOWN.sub("[REDACTED]", text)
    text = _QUERY_KEY.sub(lambda m: m.group(0).replace(m.group(1), "[REDACTED]"), text)
    return _SAID.sub(r"\1[REDACTED]", text)


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
