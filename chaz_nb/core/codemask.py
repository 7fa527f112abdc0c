"""Secrets in code, masked so that the person approving it still sees every token that runs.

The regex redaction of ``redaction.py`` reads text, not code: after ``api_key=`` it masks the
rest of the line up to a space, a quote or a comma, so ``api_key=0;exec(chr(82)+...)`` was
shown, logged and approved as ``api_key=[REDACTED]`` and the hidden ``exec`` ran. Code is
therefore masked token by token (Python's ``tokenize``):

- a STRING or NUMBER literal is replaced, whole and alone, by ``MARK`` when it holds a secret
  (the redaction changes it, or it is a literal of a credential-named variable, key or
  argument: ``password = "hunter22"``, ``{"Authorization": "Bearer x"}``, ``token=123456``).
  ``MARK`` is no Python: it cannot stand for anything but one masked literal;
- a masked literal may run ONLY when its value is, or consists only of, secret values the
  kernel itself holds (``redaction.held_secret_values``: key-named environment variables'
  values). Any other masked literal is content the model chose and the person cannot see, and
  some visible decoder (``timeit``, ``codecs``, ``int(x, 36).to_bytes``, a shell) can turn it
  into code: ``problem`` says the code holds a literal the person cannot see (line N), and the
  approval refuses it until the person edits it (reads the value with ``os.environ[...]``);
- a comment is redacted as text (it ends at its line and runs nothing);
- names, operators and calls are never rewritten. A secret found among them (a key's value
  used as a name, a provider key's shape split by an operator), a secret in an f-string whose
  ``{...}`` would be masked with it, or code that does not tokenize while the redaction would
  change it: it is masked all the same (a secret never reaches the log), and ``problem`` says
  in one line why this code cannot run as shown (the approval refuses it until it is edited).

``RUNS_TEXT`` (names that run text) only adds a reason to a refusal; the guard is the rule above.

``sha256`` is the hash of the exact code (UTF-8): with the masked text in the log, an auditor
can tell which code ran even where a literal was masked.
"""

from __future__ import annotations

import ast
import hashlib
import io
import re
import tokenize
from collections.abc import Callable
from dataclasses import dataclass, field

from .redaction import CODE_MARK as MARK
from .redaction import held_secret_values, is_credential_field, is_secret_name, redact, redact_shapes

#: a word some credential name or header rule reads (``_credential_name``, ``redaction``)
_MAY_HOLD = re.compile(r"(?i)secret|passw|token|key|auth|bearer|private")
#: a mark while masked code is read again (a name no code has)
_PLACEHOLDER = "_chaz_masked_literal_7f3c2a_"
_LITERALS = {tokenize.STRING, tokenize.NUMBER}
_FSTRING_MIDDLE = getattr(tokenize, "FSTRING_MIDDLE", None)  # Python 3.12+: an f-string's text
_ASSIGNING = {"=", ":", "==", "!=", "+=", ":=", "->"}
_OPEN, _CLOSE = set("([{"), set(")]}")
#: names that turn text into code, a command or an object (exec, a shell, a decoder): with one
#: of them in the code, a masked literal could be hidden code, so masking one is refused
RUNS_TEXT = frozenset({
    "exec", "eval", "compile", "__import__", "import_module", "run_cell", "run_line_magic", "system", "popen",
    "Popen", "run", "check_call", "check_output", "getoutput", "getstatusoutput", "execv", "execve", "getattr",
    "b64decode", "fromhex", "unhexlify", "literal_eval", "marshal", "pickle",
})
#: what a secret rarely holds and code run from a string (exec, eval) does
_CODE_LIKE = re.compile(r"[(;\n\r]|\\n")
_STRING_PREFIX = re.compile(r"^([A-Za-z]*)(['\"])")


@dataclass(frozen=True)
class MaskedCode:
    """Code as the card shows it and the log keeps it, and what masking it did."""

    text: str
    #: sha256 (hex) of the exact code, UTF-8
    sha256: str
    #: how many literals were masked
    masked: int = 0
    #: why the code cannot run as shown (one line), or None
    problem: str | None = None
    #: the masked literals, in order (never logged: ``restore_literals`` puts them back in an edit)
    literals: tuple[str, ...] = field(default=(), repr=False)

    def check(self) -> dict[str, str | int | None]:
        """What an approval request records about the code (``code_check``)."""
        return {"sha256": self.sha256, "masked_literals": self.masked, "problem": self.problem}


def code_sha256(code: str) -> str:
    """The sha256 (hex) of ``code``'s exact UTF-8 bytes (a lone surrogate as Python keeps it)."""
    return hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest()


def code_argument(arguments: object) -> str | None:
    """The code of a call whose arguments are exactly ``{"code": TEXT}`` (``kernel__run``)."""
    if isinstance(arguments, dict) and list(arguments) == ["code"] and isinstance(arguments["code"], str):
        return arguments["code"]
    return None


def code_summary(code: str) -> str:
    """A code call's arguments in one line of an entry's text (the payload has the code):
    ``code: 3 lines, 52 characters, sha256 1f2e3d4c5b6a``."""
    lines = code.count("\n") + 1
    return (f"code: {lines} line{'s' if lines != 1 else ''}, {len(code):,} characters, "
            f"sha256 {code_sha256(code)[:12]}")


def mask_code(code: str, redact_text: Callable[[str], str] = redact) -> MaskedCode:
    """``code`` with each secret-holding literal masked alone (see the module's docstring)."""
    digest = code_sha256(code)
    if not code:
        return MaskedCode(code, digest)
    if not _MAY_HOLD.search(code) and redact_text(code) == code:
        # no credential word for a name or a header rule to read, and no secret value or shape
        # anywhere: no literal of it can be masked (tokenizing costs ~15 us a token)
        return MaskedCode(code, digest)
    # code masked once already (a decision keeps the card's code as shown) tokenizes as code:
    # each mark stands in as a name while it is read, and is put back after
    source = code.replace(MARK, _PLACEHOLDER) if MARK in code else code
    lines = io.StringIO(source).readlines()
    try:
        tokens = list(tokenize.generate_tokens(iter(lines).__next__))
    except (tokenize.TokenError, SyntaxError):
        return _untokenized(code, digest, redact_text)
    if any(t.type == tokenize.ERRORTOKEN and t.string.strip() for t in tokens):
        return _untokenized(code, digest, redact_text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))

    def offset(pos: tuple[int, int]) -> int:
        row, col = pos
        return starts[row - 1] + col if row - 1 < len(starts) else len(source)

    replacements: list[tuple[int, int, str]] = []
    literals: list[str] = []
    masked = 0
    problems: list[str] = []
    for token, credential in _literal_tokens(tokens):
        start, end = offset(token.start), offset(token.end)
        text = source[start:end]
        if token.type == tokenize.COMMENT:
            shown = redact_text(text)
            if shown != text:
                replacements.append((start, end, shown))
            continue
        if not credential and redact_text(text) == text:
            continue
        if token.type == tokenize.STRING and _has_fields(text):
            problems.append(f"line {token.start[0]}: a secret in an f-string with {{…}} in it (masking it "
                            "would hide that code)")
        elif not _held(text, token.type):
            problems.append(f"line {token.start[0]}: the code holds a literal you cannot see (masked, and not a "
                            "secret the kernel holds: it could be code)")
        elif _CODE_LIKE.search(text):
            problems.append(f"line {token.start[0]}: a masked string holds ( ; or a line break, as code does "
                            "(masking it could hide code that exec or eval runs)")
        replacements.append((start, end, MARK))
        literals.append(text)
        masked += 1
    runner = next((t for t in tokens if t.type == tokenize.NAME and t.string in RUNS_TEXT), None)
    if masked and runner is not None and not problems:
        # a masked literal may be what it runs: its text would be code the person cannot see
        problems.append(f"line {runner.start[0]}: {runner.string} runs text as code or a command, and a literal "
                        "is masked (it could be that text)")
    out: list[str] = []
    last = 0
    for start, end, shown in replacements:
        out.append(source[last:start])
        out.append(shown)
        last = end
    out.append(source[last:])
    text = "".join(out)
    # a secret among the names and operators (a key's value as a name, a key split by "-")
    rest = redact_shapes(text)
    if rest != text:
        changed = _first_changed_line(text, rest)
        problems.append(f"line {changed}: a secret outside a string literal (masking it would hide code)")
        text = rest
    return MaskedCode(text.replace(_PLACEHOLDER, MARK), digest, masked, _problem_line(problems), tuple(literals))


def restore_literals(edited: str, original: str, redact_text: Callable[[str], str] = redact) -> str:
    """A person's edit of masked code with each ``MARK`` it kept given back the literal it
    stands for, in order (they edit the code around a secret they cannot see; marks as many as
    the literals of secrets the kernel holds stand for those); ValueError
    (one line) when the marks are not the ones the card showed."""
    count = edited.count(MARK)
    if not count:
        return edited
    literals = mask_code(original, redact_text).literals
    if count != len(literals):
        # the person replaced the literals they could not see and kept those of the kernel's secrets
        held = tuple(literal for literal in literals if _held(literal, _kind(literal)))
        literals = held if count == len(held) else literals
    if count != len(literals):
        raise ValueError(
            f"the edit holds {count} {MARK} mark{'s' if count != 1 else ''} and the code had {len(literals)} masked "
            f"literal{'s' if len(literals) != 1 else ''}: keep each mark where it was, or write the value "
            "as read from the environment (os.environ[...])")
    parts = edited.split(MARK)
    return "".join(part + (literals[i] if i < len(literals) else "") for i, part in enumerate(parts))


def _problem_line(problems: list[str]) -> str | None:
    if not problems:
        return None
    return (f"{problems[0]}{f' (+{len(problems) - 1} more)' if len(problems) > 1 else ''}: this code cannot "
            "run as shown; edit it so the secret is read from the environment (os.environ[...]), or deny it")


def _untokenized(code: str, digest: str, redact_text: Callable[[str], str]) -> MaskedCode:
    """Code that does not tokenize as Python: shown as is when nothing in it is secret; else
    masked as text and refused (the mask could hide code)."""
    shown = redact_text(code)
    if shown == code:
        return MaskedCode(code, digest)
    line = _first_changed_line(code, shown)
    return MaskedCode(shown, digest, 0, _problem_line([
        f"line {line}: a secret-shaped value in code that does not read as Python tokens (masking it could "
        "hide code)"]))


def _held(literal: str, kind: int) -> bool:
    """Whether a literal token's value is made only of secret values the kernel holds (its
    content is then not the model's choice, and it may run masked)."""
    held = held_secret_values()
    if not held:
        return False
    value: object = literal
    if kind == tokenize.STRING:
        try:
            value = ast.literal_eval(literal)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return False  # an f-string, or no literal Python can read alone
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                return False
    if not isinstance(value, str) or not value:
        return False
    for secret in held:  # longest first
        value = value.replace(secret, "")
    return not value


def _kind(literal: str) -> int:
    return tokenize.NUMBER if literal[:1].isdigit() or literal[:1] == "." else tokenize.STRING


def _first_changed_line(before: str, after: str) -> int:
    for n, (a, b) in enumerate(zip(before.split("\n"), after.split("\n"), strict=False), 1):
        if a != b:
            return n
    return 1


def _has_fields(literal: str) -> bool:
    """Whether a STRING token is an f-string with a replacement field (``{x}``, not ``{{``)."""
    m = _STRING_PREFIX.match(literal)
    if m is None or "f" not in m.group(1).lower():
        return False
    return "{" in literal.replace("{{", "").replace("}}", "")


def _name_of(token: tokenize.TokenInfo) -> str | None:
    """The name a NAME token or a plain string literal (a dict key, a header) spells."""
    if token.type == tokenize.NAME:
        return token.string
    if token.type == tokenize.STRING:
        m = _STRING_PREFIX.match(token.string)
        if m is not None and not set(m.group(1).lower()) & {"f", "b"}:
            body = token.string[len(m.group(0)):].rstrip("'\"")
            return body.split(":")[0].strip() if body else None
    return None


#: a name holding one of these is a credential's wherever it is (``my_secret_key``, ``db_password_2``)
_CREDENTIAL_PARTS = ("secret", "password", "passwd", "private_key", "api_key", "apikey", "access_key")


def _credential_name(name: str | None) -> bool:
    if not name:
        return False
    lowered = name.lower()
    return is_secret_name(name) or is_credential_field(name) or any(p in lowered for p in _CREDENTIAL_PARTS)


def _literal_tokens(tokens: list[tokenize.TokenInfo]) -> list[tuple[tokenize.TokenInfo, bool]]:
    """The literal and comment tokens, each with whether it is the value of a credential name
    (``NAME =``, ``"key":``, ``name=`` in a call, up to the end of that expression)."""
    found: list[tuple[tokenize.TokenInfo, bool]] = []
    depth = 0
    armed: int | None = None  # the bracket depth of the credential name whose value this is
    significant: list[tokenize.TokenInfo] = []
    for i, token in enumerate(tokens):
        kind = token.type
        if kind in (tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            continue
        if kind == tokenize.COMMENT:
            found.append((token, False))
            continue
        if kind == tokenize.NEWLINE or kind == tokenize.ENDMARKER:
            armed = None
            significant.clear()
            continue
        if kind == tokenize.OP:
            op = token.string
            if op in _OPEN:
                depth += 1
            elif op in _CLOSE:
                depth -= 1
                if armed is not None and depth < armed:
                    armed = None
            elif op in (";",) or (op == "," and armed is not None and depth <= armed):
                armed = None
            elif op in _ASSIGNING and significant and _credential_name(_name_of(_target(significant))):
                armed = depth
        elif kind in _LITERALS or kind == _FSTRING_MIDDLE:
            # a number nested in a call under the name (``token=f(1, 2)``) is an argument, not the value
            credential = (armed is not None and not _subscript_key(significant, tokens, i)
                          and (kind != tokenize.NUMBER or depth == armed))
            found.append((token, credential))
        significant.append(token)
    return found


def _target(before: list[tokenize.TokenInfo]) -> tokenize.TokenInfo:
    """What an ``=`` or ``:`` gives a value to: the name before it, or the key of a subscript
    (``headers["X-Api-Key"] = ...``)."""
    if len(before) >= 3 and before[-1].string == "]" and before[-3].string == "[":
        return before[-2]
    return before[-1]


def _subscript_key(before: list[tokenize.TokenInfo], tokens: list[tokenize.TokenInfo], i: int) -> bool:
    """``environ["NAME"]`` / ``getenv("NAME")``: a literal that names where a secret is read
    from is no secret (the way the card asks code to take one)."""
    if not before or before[-1].type != tokenize.OP:
        return False
    after = next((tokens[j] for j in range(i + 1, len(tokens))
                  if tokens[j].type not in (tokenize.NL, tokenize.COMMENT)), None)
    if before[-1].string == "[":
        return after is not None and after.string == "]"
    if before[-1].string == "(" and len(before) >= 2 and before[-2].string in ("getenv", "get", "environ"):
        return after is not None and after.string in (")", ",")
    return False
