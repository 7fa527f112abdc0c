"""The approval card: one open ApprovalRequest, with Approve / Deny / Approve-all / Edit.

Inside a live session view (``SessionView``), hence in the output of the cell whose run parked
on it, the card is drawn by the view's one widget (session_live.py, static/session.js) and
``ApprovalWidget(widget=False)`` is its kernel side: what a click decides, and the decision
followed in the store. ``%chaz approve/deny`` and the JupyterLab sidebar decide the same
requests; whoever decides (a click, a cell, the sidebar, the timeout), the matching
ApprovalDecision disables the buttons and the card says what was decided and by whom. With
``widget=True`` the card is an ipywidgets box of its own.

Like the session view it is displayed as one MIME bundle: the live widget where a widget
manager exists, plus ``text/plain`` and ``text/html`` (a static card) everywhere else. Every
string that comes from an agent, a tool or a user passes through ``html.escape``. Nothing here
prints: a click is handled from the kernel's comm handler, output goes through the widget.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any
from collections.abc import Callable

from ...core.redaction import CODE_MARK
from ...core.controls import name_hidden
from .code import CODE_CSS, code_html, code_of, code_text
from .display import StaticFallbackView, close_widget
from .display import esc as _esc

log = logging.getLogger("chaz_nb.notebook.views.approval")
log.addHandler(logging.NullHandler())

#: characters of the pretty arguments shown (the log has all of them)
MAX_ARGS_CHARS = 4000
#: characters of one string argument shown, so every argument fits in the card
MAX_VALUE_CHARS = 500

_VERBS = {
    "approve": "approved",
    "approve_all": "approved (all calls to this tool in this session)",
    "deny": "denied",
    "timed_out": "timed out (denied by default)",
}
_MARKS = {"approve": "✓", "approve_all": "✓", "deny": "✗", "timed_out": "⌛"}

CARD_CSS = (
    "<style>"
    ".chaz-ap{font-family:var(--jp-ui-font-family,sans-serif);font-size:12px;"
    "border:1px solid var(--jp-border-color2,#ccc);border-left:4px solid var(--jp-warn-color1,#e0a000);"
    "padding:4px 8px;margin:4px 0;border-radius:3px}"
    ".chaz-ap.chaz-ap-done{border-left-color:var(--jp-border-color1,#888)}"
    ".chaz-ap .chaz-ap-risk-high{color:var(--jp-error-color1,#c00);font-weight:bold}"
    ".chaz-ap .chaz-ap-risk-medium{color:var(--jp-warn-color0,#b60)}"
    ".chaz-ap pre{margin:2px 0;white-space:pre-wrap;word-break:break-word;"
    "font-family:var(--jp-code-font-family,monospace)}"
    ".chaz-ap .chaz-ap-hint{color:var(--jp-ui-font-color2,#777)}"
    ".chaz-ap-editor textarea{font-family:var(--jp-code-font-family,monospace);"
    "font-size:var(--jp-code-font-size,12px)}"
    + CODE_CSS
    + "</style>"
)




def pretty_arguments(arguments: Any) -> str:
    """Arguments as indented JSON (sensitive values are already masked by the server)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    try:
        text = json.dumps(_cut_values(arguments), indent=2, ensure_ascii=False, sort_keys=False, default=str)
    except (TypeError, ValueError):  # pragma: no cover - payloads are JSON already
        text = str(arguments)
    if len(text) <= MAX_ARGS_CHARS:
        return text
    return text[: MAX_ARGS_CHARS - 60] + f"… ({len(text) - MAX_ARGS_CHARS + 60:,} more characters: %chaz log has them)"


def _cut_values(value: Any) -> Any:
    """``value`` with each long string cut on its own (saying by how much): one long argument
    must not push the others out of the card, where the person would approve them unseen."""
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        return value[:MAX_VALUE_CHARS] + f"… ({len(value) - MAX_VALUE_CHARS:,} more characters)"
    if isinstance(value, dict):
        return {key: _cut_values(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_cut_values(item) for item in value]
    return value


def request_info(request: Any) -> dict[str, Any]:
    """The fields the widget shows, from a ``pending_approvals()`` dict or an ApprovalRequest entry."""
    if isinstance(request, dict):
        return dict(request)
    p = getattr(request, "payload", None) or {}
    return {
        "request_id": p.get("request_id"),
        "entry_id": getattr(request, "id", None),
        "session_id": getattr(request, "session_id", None),
        "agent": p.get("agent", getattr(request, "sender", None)),
        "run_id": p.get("run_id"),
        "tool_name": p.get("tool_name", getattr(request, "tool_name", None)),
        "risk_level": p.get("risk_level"),
        "arguments_display": p.get("arguments_display"),
        "code_check": p.get("code_check"),
        "timeout_secs": p.get("timeout_secs"),
        "kind": p.get("kind", "tool"),
    }


def is_egress(info: dict[str, Any]) -> bool:
    """A card that asks whether the notebook's data may leave (server/egress_gate.py), not
    whether a tool may run: Allow once / Allow for this session / Deny, nothing to edit."""
    return info.get("kind") == "egress"


#: the buttons' labels of an egress card (the decisions are approve / approve_all / deny)
EGRESS_LABELS = {"approve": "Allow once", "deny": "Deny", "approve_all": "Allow for this session"}


def describe_decision(payload: dict[str, Any], sender: str | None = None) -> str:
    """``approved by user``, ``denied by user: reason``, ``timed out … by system: …``."""
    decision = str(payload.get("decision"))  # "None" for a payload without one: shown as is
    who = payload.get("decided_by") or sender or "?"
    text = f"{_MARKS.get(decision, '•')} {_VERBS.get(decision, str(decision))} by {who}"
    if payload.get("edited"):
        text += " with edited arguments"
    reason = payload.get("reason")
    return text + (f": {reason}" if reason else "")


def edit_text(arguments: Any) -> str:
    """What the Edit box (and ``%chaz approve --edit``) starts from: the code of a code call,
    else the whole arguments as indented JSON (as shown: masked, hidden characters named)."""
    code = code_of(arguments)
    if code is not None:
        return code
    return json.dumps(arguments if arguments is not None else {}, indent=2, ensure_ascii=False, default=str)


def edited_arguments(arguments: Any, text: str) -> dict[str, Any] | str:
    """The edit box's text as what ``server.decide(arguments=...)`` takes: ``{"code": text}``
    for a code call, else the JSON text (the server parses and checks it)."""
    return {"code": text} if code_of(arguments) is not None else text


class ApprovalWidget(StaticFallbackView):
    """One approval request: what is asked, the buttons, and the decision once there is one.

    ``server``: the chaz Server (``decide``, ``store``, ``approvals``). ``request``: a dict of
    ``server.pending_approvals()`` or the ApprovalRequest entry. ``decided_by``: the name a
    click records (``user``). ``on_change``: called after every change (e.g. a session view
re-rendering its static bundle).
    """

    def __init__(
        self,
        server: Any,
        request: Any,
        *,
        decided_by: str = "user",
        widget: bool = True,
        on_change: Callable[[ApprovalWidget], None] | None = None,
    ) -> None:
        self.server = server
        self.info = request_info(request)
        self.request_id: str = str(self.info.get("request_id") or "")
        self.decided_by = decided_by
        self.decision: dict[str, Any] | None = None  # payload of the effective decision
        self.decision_sender: str | None = None
        self.message: str = ""  # the last click's answer (e.g. "already decided: ...")
        self._on_change = on_change
        self._lock = threading.Lock()
        self._unsubscribe: Callable[[], None] | None = None
        self._box: Any = None
        self.buttons: dict[str, Any] = {}
        self.reason: Any = None
        self.editor: Any = None  # the Edit box (hidden until Edit is clicked)
        self.edit_button: Any = None
        self._status: Any = None
        existing = self._lookup_decision()
        if existing is not None:
            self._set_decision(existing.payload, existing.sender, render=False)
        else:
            self._unsubscribe = server.store.subscribe(self._on_write)
        if widget:
            self._build()

    # ---------------------------------------------------------- state
    @property
    def decided(self) -> bool:
        return self.decision is not None

    def _lookup_decision(self) -> Any:
        try:
            return self.server.approvals.decision_of(self.request_id)
        except Exception:  # noqa: BLE001 - a fake server, or the store is closed: render undecided
            return None

    def _on_write(self, entry: Any) -> None:
        """Store callback: the matching ApprovalDecision closes the widget, whoever wrote it."""
        t = getattr(getattr(entry, "entry_type", None), "value", getattr(entry, "entry_type", None))
        if t != "ApprovalDecision":
            return
        payload = getattr(entry, "payload", None) or {}
        if payload.get("request_id") != self.request_id:
            return
        # the effective decision (timed_out wins; agents' decisions are ignored by the book)
        effective = self._lookup_decision()
        if effective is None:
            if entry.sender in getattr(self.server, "agents", {}):
                return
            effective = entry
        self._set_decision(effective.payload, effective.sender)

    def _set_decision(self, payload: dict[str, Any], sender: str | None, render: bool = True) -> None:
        with self._lock:
            self.decision = dict(payload)
            self.decision_sender = sender
            unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        if render:
            self._render()

    # ---------------------------------------------------------- deciding
    def decide(
        self, decision: str, reason: str | None = None, arguments: dict[str, Any] | str | None = None
    ) -> tuple[bool, str]:
        """What a button does: write the decision through the server (a person's bridge);
        ``arguments``: approve with edits (a bad edit is refused and the request stays open)."""
        reason = (reason or "").strip() or None
        if arguments is None:
            ok, message = self.server.decide(self.request_id, decision, reason=reason, decided_by=self.decided_by)
        else:
            ok, message = self.server.decide(
                self.request_id, decision, reason=reason, decided_by=self.decided_by, arguments=arguments
            )
        self.message = "" if ok else message
        if not self.decided:
            existing = self._lookup_decision()
            if existing is not None:
                self._set_decision(existing.payload, existing.sender, render=False)
        self._render()
        return ok, message

    def _click(self, decision: str) -> Callable[[Any], None]:
        def handler(_button: Any) -> None:
            try:
                if decision == "approve_edited":
                    self.approve_edited()
                    return
                reason = self.reason.value if (decision == "deny" and self.reason is not None) else None
                self.decide(decision, reason)
            except Exception as exc:  # never raise into the comm handler
                log.exception("approval click failed")
                self.message = f"could not decide: {exc}"
                self._render()

        return handler

    def toggle_editor(self, _button: Any = None) -> None:
        """The Edit button: show the arguments (the code of a code call) in an editable box."""
        if self.editor is None:
            return
        opening = self.editor.layout.display == "none"
        if opening and not self.editor.value:
            self.editor.value = edit_text(self.info.get("arguments_display"))
        self.editor.layout.display = None if opening else "none"
        self.buttons["approve_edited"].layout.display = None if opening else "none"

    def approve_edited(self, text: str | None = None) -> tuple[bool, str]:
        """The "Approve edited" button: approve with the edit box's arguments (or ``text``)."""
        if text is None:
            text = self.editor.value if self.editor is not None else edit_text(self.info.get("arguments_display"))
        return self.decide("approve", arguments=edited_arguments(self.info.get("arguments_display"), text))

    # ---------------------------------------------------------- widget
    def _build(self) -> None:
        try:
            import ipywidgets as w
        except ImportError:  # pragma: no cover - ipywidgets is a dependency
            return
        self._head = w.HTML(self._card_html(buttons_hint=False))
        self.buttons = {
            "approve": w.Button(description="Approve", button_style="success", icon="check",
                                layout=w.Layout(width="auto", flex="0 0 auto"), tooltip="Run this call once"),
            "deny": w.Button(description="Deny", button_style="danger", icon="times",
                             tooltip="Do not run it; the agent is told (with the reason)"),
            "approve_all": w.Button(description="Approve all calls to this tool in this session",
                                    icon="check-double",
                                    layout=w.Layout(width="auto"),
                                    tooltip="Approve this call and every later call to this tool in this session"),
        }
        self.buttons["approve_edited"] = w.Button(
            description="Approve edited", button_style="warning", icon="check",
            layout=w.Layout(width="auto", display="none"),
            tooltip="Run this call once, with the arguments as edited above (checked against the tool's schema)",
        )
        if is_egress(self.info):
            for decision, label in EGRESS_LABELS.items():
                self.buttons[decision].description = label
            self.buttons["approve"].tooltip = "Send this data to the model once"
            self.buttons["deny"].tooltip = "Keep it in the kernel: the model reads one line saying it was withheld"
            self.buttons["approve_all"].tooltip = "Send it, and the agent's later data to this host in this session"
        for decision, button in self.buttons.items():
            button.on_click(self._click(decision))
        code = code_of(self.info.get("arguments_display")) is not None
        self.edit_button = w.Button(
            description="Edit", icon="pencil",
            tooltip="Edit the code before approving" if code else "Edit the arguments (JSON) before approving",
        )
        self.edit_button.on_click(self.toggle_editor)
        self.edit_button.add_class("chaz-ap-edit")
        self.buttons["approve_edited"].add_class("chaz-ap-approve-edited")
        # one colour for Approve in the cell and in the sidebar: --chaz-approve-color (base.css)
        self.buttons["approve"].add_class("chaz-ap-approve")
        lines = edit_text(self.info.get("arguments_display")).count("\n") + 2
        self.editor = w.Textarea(layout=w.Layout(width="98%", height=f"{min(max(lines, 4), 30) * 1.4 + 1:.0f}em",
                                                 display="none"))
        self.editor.add_class("chaz-ap-editor")
        self.reason = w.Text(placeholder="reason (optional, sent with Deny)", layout=w.Layout(width="260px"))
        self._status = w.HTML("")
        self._row = w.HBox([self.buttons["approve"], self.buttons["deny"], self.reason, self.buttons["approve_all"],
                            *([] if is_egress(self.info) else [self.edit_button])])
        self._edit_row = w.VBox([self.editor, self.buttons["approve_edited"]])
        self._box = w.VBox([self._head, self._row, self._edit_row, self._status])
        self._box.add_class("chaz-approval-widget")
        self._render()

    def _render(self) -> None:
        if self._on_change is not None:
            try:
                self._on_change(self)
            except Exception:
                log.exception("approval widget on_change failed")
        if self._box is None:
            return
        done = self.decided
        for button in [*self.buttons.values(), self.edit_button]:
            button.disabled = done
        if self.reason is not None:
            self.reason.disabled = done
        if self.editor is not None:
            self.editor.disabled = done
        self._head.value = self._card_html(buttons_hint=False)
        status = ""
        if done:
            status = f"<b>{_esc(self.outcome())}</b>"
        if self.message:
            status += f" <span class='chaz-ap-hint'>{_esc(self.message)}</span>"
        self._status.value = f"<div class='chaz-ap'>{status}</div>" if status else ""

    @property
    def widget(self) -> Any:
        return self._box

    def close(self) -> None:
        """Stop following the store and close the widgets."""
        with self._lock:
            unsubscribe, self._unsubscribe = self._unsubscribe, None
        if unsubscribe is not None:
            unsubscribe()
        box, self._box = self._box, None
        if box is None:
            return
        for wdg in [*self.buttons.values(), self.edit_button, self.editor, self.reason, self._status, self._head,
                    self._row, self._edit_row, box]:
            close_widget(wdg)  # with its layout and style; never raises

    # ---------------------------------------------------------- text / html
    def outcome(self) -> str:
        if self.decision is None:
            return "waiting for a decision"
        return describe_decision(self.decision, self.decision_sender)

    def text(self) -> str:
        return card_text(self.info, self.decision, self.decision_sender)

    def _card_html(self, buttons_hint: bool = True) -> str:
        return card_html(self.info, self.decision, self.decision_sender, hint=buttons_hint)

    def html(self) -> str:
        return self._card_html(buttons_hint=True)


def _shown(arguments: Any) -> Any:
    """Edited arguments as the card shows arguments: hidden characters named."""
    if isinstance(arguments, str):
        return name_hidden(arguments)
    if isinstance(arguments, dict):
        return {name_hidden(str(k)): _shown(v) for k, v in arguments.items()}
    if isinstance(arguments, list):
        return [_shown(v) for v in arguments]
    return arguments


def decide_hint(session_id: Any) -> str:
    """What to do about an open request (the waiting cell says nothing else on stdout)."""
    return (
        "click Approve / Deny (Edit: change the arguments first), or run %chaz approve last  |  "
        "%chaz approve last --edit  |  %chaz deny last --reason R; "
        f"the run resumes once it is decided (%chaz wait {session_id} follows it)"
    )


def code_notes(info: dict[str, Any]) -> list[str]:
    """What the card says about a code call's code (its ``code_check``): why it cannot run as
    shown, how many literals are masked, and the hash of the code."""
    check = info.get("code_check")
    if not isinstance(check, dict):
        return []
    notes = []
    if check.get("problem"):
        notes.append(f"⛔ Approve is refused: {check['problem']}")
    masked = check.get("masked_literals")
    if isinstance(masked, int) and masked:
        notes.append(f"{masked} secret literal{'s' if masked != 1 else ''} shown as {CODE_MARK}: each stands for "
                     "that one literal (only a secret the kernel holds runs masked, with its real value)")
    if check.get("sha256"):
        notes.append(f"sha256 {str(check['sha256'])[:16]}… (the log keeps it with the code that runs)")
    return notes


def card_text(info: dict[str, Any], decision: dict[str, Any] | None, sender: str | None = None) -> str:
    """The approval card as plain text: what is asked, and the decision or what to do."""
    lines = [
        f"⚠ approval needed: {info.get('agent')} wants to run {info.get('tool_name')} "
        f"(risk {info.get('risk_level')}) · session {info.get('session_id')} · request {info.get('request_id')}",
    ] if not is_egress(info) else [
        f"⚠ data would leave: {info.get('agent')} would send the notebook's data to "
        f"{_to(info)} · session {info.get('session_id')} · request {info.get('request_id')} "
        "(approve = allow once, approve --all-calls = allow for this session, deny)",
    ]
    lines += ["  " + line for line in arguments_text(info.get("arguments_display")).splitlines()]
    lines += ["  " + note for note in code_notes(info)]
    if decision is None:
        lines.append("  → " + decide_hint(info.get("session_id")))
    else:
        lines.append(f"  {describe_decision(decision, sender)}")
        if decision.get("edited"):
            edited = arguments_text(_shown(decision.get("arguments")))
            lines += ["  edited to:"] + ["  " + line for line in edited.splitlines()]
    return "\n".join(lines)


def _to(info: dict[str, Any]) -> str:
    """Where an egress card's data would go (``model at host``)."""
    shown = info.get("arguments_display")
    return str(shown.get("to") if isinstance(shown, dict) else info.get("tool_name"))


def arguments_text(arguments: Any) -> str:
    """Arguments as plain text: a code call's code with line numbers, else indented JSON."""
    code = code_of(arguments)
    return code_text(code) if code is not None else pretty_arguments(arguments)


def arguments_html(arguments: Any) -> str:
    """Arguments as HTML: a code call's code as a numbered code block, else indented JSON."""
    code = code_of(arguments)
    return code_html(code) if code is not None else f"<pre>{_esc(pretty_arguments(arguments))}</pre>"


def card_html(
    info: dict[str, Any], decision: dict[str, Any] | None, sender: str | None = None, *, hint: bool = True
) -> str:
    """The approval card as HTML (every string escaped); ``hint``: say how to decide."""
    risk = str(info.get("risk_level") or "")
    risk_cls = "chaz-ap-risk-" + "".join(c for c in risk if c.isalpha())
    parts = [
        CARD_CSS,
        f"<div class='chaz-ap{' chaz-ap-done' if decision is not None else ''}'>",
        (f"⚠ <b>{_esc(info.get('agent'))}</b> would send the notebook's data to <b>{_esc(_to(info))}</b> "
         if is_egress(info) else
         f"⚠ <b>{_esc(info.get('agent'))}</b> wants to run <b>{_esc(info.get('tool_name'))}</b> "
         f"<span class='{_esc(risk_cls)}'>risk {_esc(risk)}</span> "),
        f"<span class='chaz-ap-hint'>· session {_esc(info.get('session_id'))} · request "
        f"<code>{_esc(info.get('request_id'))}</code></span>",
        arguments_html(info.get("arguments_display")),
        *(f"<div class='chaz-ap-hint chaz-ap-code-note'>{_esc(note)}</div>" for note in code_notes(info)),
    ]
    if decision is not None:
        parts.append(f"<div><b>{_esc(describe_decision(decision, sender))}</b></div>")
        if decision.get("edited"):
            edited = arguments_html(_shown(decision.get("arguments")))
            parts.append(f"<div class='chaz-ap-hint'>edited to:</div>{edited}")
    elif hint:
        sid = _esc(info.get("session_id"))
        parts.append(
            "<div class='chaz-ap-hint'>decide with <code>%chaz approve last</code> or "
            "<code>%chaz deny last --reason R</code>; the run resumes once it is decided "
            f"(<code>%chaz wait {sid}</code> follows it)</div>"
        )
    parts.append("</div>")
    return "".join(parts)
