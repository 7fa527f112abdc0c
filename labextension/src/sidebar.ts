/**
 * The "Chaz" sidebar panel: the followed notebook kernel's sessions and its
 * pending approvals with Approve / Deny buttons, live over the `chaz` comm.
 * A session whose run is going on (running, or parked on an approval) has a
 * Stop button: it sends `{type: "stop", session_id}` (what `%chaz stop N`
 * does) and stays disabled until the kernel refuses or the run is over.
 *
 * DOM is built with textContent only (see `el`); pending approval cards are
 * kept by request_id across updates so a reason being typed is not lost.
 *
 * Clicking a session opens its chat (./chat): the live transcript, its approval cards (moved
 * there from the list while it is open), Stop, and a message box; "New chat" starts one with
 * an agent. A notice (what a click did) clears after `NOTICE_MS` or at the next click.
 */
import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { ChatView, isAgentName } from './chat';
import { ChazClient, ConnectionStatus } from './client';
import { codeNotes, codeOf, renderCode, visible } from './code';
import { ownKeys } from './keys';
import { argsPreview, el, formatJSON, formatTime } from './transcript';
import {
  IDecidedMessage,
  IPendingApproval,
  ISessionSummary,
  IStateMessage,
  IStoppedMessage
} from './types';

const STATUS_TEXT: { [k in ConnectionStatus]: string } = {
  'no-notebook': 'No notebook is active: open a notebook to see its chaz sessions.',
  'no-kernel': 'This notebook has no kernel.',
  connecting: 'Connecting to the kernel…',
  unavailable:
    'chaz is not loaded in this kernel: run %load_ext chaz_nb in the notebook.',
  connected: 'Connected.',
  disconnected: 'The kernel closed the chaz channel.'
};

/** How long a notice stays (ms): it says what the last click did, not how things are now. */
export const NOTICE_MS = 8000;

/** What the panel follows of a notebook: its path, and when the path changes (a rename). */
export interface IPathSource {
  path: string;
  pathChanged: ISignal<any, string>;
}

/** Pick the oldest pending approval (by created_at, then list order). */
export function oldestPending(
  pending: IPendingApproval[]
): IPendingApproval | null {
  let best: IPendingApproval | null = null;
  for (const p of pending) {
    if (
      best === null ||
      (p.created_at ?? '') < (best.created_at ?? '') ||
      ((best.created_at ?? '') === '' && (p.created_at ?? '') !== '')
    ) {
      best = p;
    }
  }
  return best;
}

/** What a card's Edit box starts from: a code call's code, else the arguments as JSON. */
export function editText(args: unknown): string {
  const code = codeOf(args);
  return code !== null ? code : formatJSON(args ?? {});
}

export class ChazPanel extends Widget {
  constructor(client: ChazClient) {
    super();
    this._client = client;
    this.id = 'chaz-sidebar';
    this.addClass('chaz-panel');
    this.title.caption = 'Chaz: sessions and approvals';
    const doc = this.node.ownerDocument;

    const header = el(doc, 'div', 'chaz-panel-header');
    header.appendChild(el(doc, 'h2', 'chaz-panel-title', 'Chaz'));
    const refresh = el(doc, 'button', 'jp-Button jp-mod-styled chaz-refresh', 'Refresh');
    refresh.title = 'Ask the kernel for a fresh state (or reconnect)';
    refresh.addEventListener('click', () => this._client.refresh());
    header.appendChild(refresh);
    this.node.appendChild(header);

    this._target = el(doc, 'div', 'chaz-panel-target');
    this.node.appendChild(this._target);
    this._statusNode = el(doc, 'div', 'chaz-panel-status');
    this.node.appendChild(this._statusNode);
    this._notice = el(doc, 'div', 'chaz-panel-notice');
    this.node.appendChild(this._notice);
    // a click is the next action: an older notice is stale (its handler may say something new)
    this.node.addEventListener('click', () => this._clearNotice(), true);

    this._newChat = el(doc, 'div', 'chaz-new-chat');
    this.node.appendChild(this._newChat);
    this._chat = new ChatView(doc, {
      send: msg => this._client.send(msg),
      loadEarlier: (sessionId, beforeSeq) => this._client.page(sessionId, beforeSeq),
      stop: sessionId => this.stopSession(sessionId),
      isStopping: sessionId => this._stopping.has(sessionId),
      back: () => this.closeChat()
    });

    this._pendingTitle = el(doc, 'h3', 'chaz-panel-section', 'Pending approvals');
    this.node.appendChild(this._pendingTitle);
    this._pendingList = el(doc, 'div', 'chaz-pending-list');
    this.node.appendChild(this._pendingList);

    this._sessionsTitle = el(doc, 'h3', 'chaz-panel-section', 'Sessions');
    this.node.appendChild(this._sessionsTitle);
    this._sessionList = el(doc, 'ul', 'chaz-session-list');
    this.node.appendChild(this._sessionList);
    this.node.appendChild(this._chat.node);

    client.statusChanged.connect(this._onStatus, this);
    client.stateReceived.connect(this._onState, this);
    client.decided.connect(this._onDecided, this);
    client.stopped.connect(this._onStopped, this);
    client.chatReceived.connect((_, msg) => this._chat.onChat(msg), this);
    client.sent.connect((_, msg) => this._chat.onSent(msg), this);
    this._onStatus(client, client.status);
  }

  /** The chat (./chat): a session's transcript and message box. */
  get chat(): ChatView {
    return this._chat;
  }

  /** Open the chat of a session (a click on it in the list). */
  openChat(sessionId: number): void {
    this.node.classList.add('chaz-mode-chat');
    if (!this._chat.open(sessionId)) {
      this._say('Not connected to a kernel with chaz loaded.', true);
    }
    this._renderState(this._client.state);
  }

  /** A new chat with an agent: its first Message starts a fresh session. */
  newChat(agent: string): void {
    this.node.classList.add('chaz-mode-chat');
    this._chat.draft(agent);
    this._renderState(this._client.state);
  }

  /** Back to the lists. */
  closeChat(): void {
    this._chat.close();
    this.node.classList.remove('chaz-mode-chat');
    this._renderState(this._client.state);
  }

  /** Follow a notebook's path (the `Notebook:` line), a rename included; null: none. */
  followPath(source: IPathSource | null): void {
    if (this._pathSource) {
      this._pathSource.pathChanged.disconnect(this._onPath, this);
    }
    if (source !== this._pathSource && this._chat.active) {
      this.closeChat(); // another notebook: another kernel, another store
    }
    this._pathSource = source;
    if (source) {
      source.pathChanged.connect(this._onPath, this);
    }
    this.setTarget(source ? source.path : '');
  }

  private _onPath(_: unknown, path: string): void {
    this.setTarget(typeof path === 'string' ? path : '');
  }

  get client(): ChazClient {
    return this._client;
  }

  get pending(): IPendingApproval[] {
    return this._client.state?.pending ?? [];
  }

  /** Show which notebook the panel follows. */
  setTarget(label: string): void {
    this._target.textContent = label ? `Notebook: ${label}` : '';
  }

  /** Approve the oldest pending request; false when there is none. */
  approveOldest(): boolean {
    const oldest = oldestPending(this.pending);
    if (!oldest) {
      this._say('No pending approvals.', false);
      return false;
    }
    // the card's own Approve is disabled for such code: the command may not go round it
    if (codeNotes(oldest.code_check).refused) {
      this._say(
        `The oldest pending request (${visible(oldest.tool_name)}) cannot be approved as shown: ` +
          'open its card, Edit the code, then Approve edited.',
        true
      );
      return true;
    }
    return this._decide(oldest, 'approve', null);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._client.statusChanged.disconnect(this._onStatus, this);
    this._client.stateReceived.disconnect(this._onState, this);
    this._client.decided.disconnect(this._onDecided, this);
    this._client.stopped.disconnect(this._onStopped, this);
    Signal.disconnectReceiver(this);
    this.followPath(null);
    this._clearNotice();
    super.dispose();
  }

  private _onStatus(_: ChazClient, status: ConnectionStatus): void {
    this.node.dataset.status = status;
    this._statusNode.textContent = STATUS_TEXT[status];
    this._statusNode.className = `chaz-panel-status chaz-conn-${status}`;
    if (status !== 'connected') {
      this._renderState(null);
    } else {
      this._chat.reopen(); // (re)connected: the chat's session again, whole
    }
  }

  private _onState(_: ChazClient, state: IStateMessage): void {
    this._renderState(state);
  }

  private _onDecided(_: ChazClient, msg: IDecidedMessage): void {
    const card = this._cards.get(msg.request_id);
    if (!msg.ok && card) {
      card.classList.remove('chaz-deciding');
      card.querySelectorAll('button').forEach(b => (b.disabled = b.dataset.refused === 'true'));
      const err = card.querySelector('.chaz-card-error');
      if (err) {
        err.textContent = visible(msg.message || 'The kernel refused the decision.');
      }
    }
    this._say(
      msg.message || (msg.ok ? 'Decision recorded.' : 'Decision refused.'),
      !msg.ok
    );
  }

  private _onStopped(_: ChazClient, msg: IStoppedMessage): void {
    if (!msg.ok) {
      this._stopping.delete(msg.session_id);
      this._renderState(this._client.state);
    }
    this._chat.refreshStop();
    this._say(msg.message || (msg.ok ? 'Stop requested.' : 'The kernel refused the stop.'), !msg.ok);
  }

  /** Ask the kernel to stop a session's run; false when not connected. */
  stopSession(sessionId: number): boolean {
    if (!this._client.stop(sessionId)) {
      this._say('Not connected to a kernel with chaz loaded.', true);
      return false;
    }
    this._stopping.add(sessionId);
    this._renderState(this._client.state);
    this._chat.refreshStop();
    this._say(`Stopping session ${sessionId}…`, false);
    return true;
  }

  private _say(text: string, isError: boolean): void {
    this._notice.textContent = text;
    this._notice.classList.toggle('chaz-notice-error', isError);
    if (this._noticeTimer !== null) {
      window.clearTimeout(this._noticeTimer);
    }
    this._noticeTimer = text ? window.setTimeout(() => this._clearNotice(), NOTICE_MS) : null;
  }

  private _clearNotice(): void {
    if (this._noticeTimer !== null) {
      window.clearTimeout(this._noticeTimer);
      this._noticeTimer = null;
    }
    this._notice.textContent = '';
    this._notice.classList.remove('chaz-notice-error');
  }

  private _decide(
    p: IPendingApproval,
    decision: 'approve' | 'deny' | 'approve_all',
    reason: string | null,
    args?: { [key: string]: unknown } | string
  ): boolean {
    const ok = this._client.decide(p.request_id, decision, reason, args);
    const card = this._cards.get(p.request_id);
    if (!ok) {
      this._say('Not connected to a kernel with chaz loaded.', true);
      return false;
    }
    if (card) {
      card.classList.add('chaz-deciding');
      card.querySelectorAll('button').forEach(b => (b.disabled = true));
    }
    this._say(
      `${decision === 'approve_all' ? 'Allowing for this session'
        : decision === 'approve' ? (args === undefined ? 'Approving' : 'Approving (edited)') : 'Denying'} ${p.tool_name}…`,
      false
    );
    return true;
  }

  /**
   * "Approve edited": approve with the Edit box's arguments (a code call's box holds its code,
   * sent as `{code}`; any other holds JSON text, which the kernel parses and checks against
   * the tool's schema: a bad edit comes back as the card's error, the request stays open).
   */
  approveEdited(requestId: string): boolean {
    const p = this.pending.find(x => x.request_id === requestId);
    if (!p) {
      return false;
    }
    const text = this._edits.get(requestId) ?? editText(p.arguments_display);
    const args = codeOf(p.arguments_display) !== null ? { code: text } : text;
    return this._decide(p, 'approve', null, args);
  }

  private _renderState(state: IStateMessage | null): void {
    const pending = state?.pending ?? [];
    const sessions = state?.sessions ?? [];
    this._renderPending(pending, state !== null);
    this._renderSessions(sessions, state !== null);
    this._renderNewChat(state?.agents ?? []);
  }

  private _renderPending(pending: IPendingApproval[], connected: boolean): void {
    const doc = this.node.ownerDocument;
    this._pendingTitle.textContent = `Pending approvals (${pending.length})`;
    const keep = new Set(pending.map(p => p.request_id));
    for (const [rid, card] of Array.from(this._cards.entries())) {
      if (!keep.has(rid)) {
        card.remove();
        this._cards.delete(rid);
        this._reasons.delete(rid);
        this._edits.delete(rid);
      }
    }
    this._pendingList.querySelectorAll('.chaz-empty').forEach(n => n.remove());
    const last = new Map<HTMLElement, HTMLElement>(); // the card placed last in each list
    for (const p of pending) {
      let card = this._cards.get(p.request_id);
      if (!card) {
        card = this._makeCard(p);
        this._cards.set(p.request_id, card);
      }
      // the kernel's order; the open chat's cards are inline. A card already in its place is
      // not moved: moving a node takes the focus from its Edit or reason box while one types.
      const inChat = this._chat.active && this._chat.sessionId !== null && p.session_id === this._chat.sessionId;
      const list = inChat ? this._chat.approvals : this._pendingList;
      const prev = last.get(list);
      const placed = card.parentNode === list && (prev ? card.previousElementSibling === prev : !card.previousElementSibling?.classList.contains('chaz-card'));
      if (!placed) {
        list.insertBefore(card, prev ? prev.nextSibling : list.firstChild);
      }
      last.set(list, card);
    }
    if (pending.length === 0) {
      this._pendingList.appendChild(
        el(doc, 'div', 'chaz-empty', connected ? 'Nothing waits for approval.' : '—')
      );
    }
  }

  private _makeCard(p: IPendingApproval): HTMLElement {
    const doc = this.node.ownerDocument;
    const card = el(doc, 'div', 'chaz-card');
    card.dataset.requestId = p.request_id;
    const head = el(doc, 'div', 'chaz-card-head');
    head.appendChild(el(doc, 'span', 'chaz-tool-name', p.tool_name));
    const risk = p.kind === 'egress' ? '' : String(p.risk_level ?? '');
    if (risk) {
      head.appendChild(
        el(doc, 'span', `chaz-risk chaz-risk-${risk.replace(/[^a-z]/gi, '')}`, `${risk} risk`)
      );
    }
    card.appendChild(head);
    const meta = el(
      doc,
      'div',
      'chaz-card-meta',
      `${p.agent} · session ${p.session_id}${p.created_at ? ' · ' + formatTime(p.created_at) : ''}`
    );
    card.appendChild(meta);
    const code = codeOf(p.arguments_display);
    // a code call's check, as the cell's card says it: Approve is refused where a mask could
    // hide code (Edit, then Approve edited, still runs what the person wrote)
    const check = codeNotes(p.code_check);
    if (code !== null) {
      // kernel__run and any call whose one argument is code: shown as code
      card.appendChild(renderCode(doc, code));
      if (check.refused) {
        card.appendChild(el(doc, 'div', 'chaz-card-refused', check.refused));
      }
      for (const note of check.notes) {
        card.appendChild(el(doc, 'div', 'chaz-card-note', note));
      }
    } else {
      const args = el(doc, 'pre', 'chaz-pre chaz-card-args', formatJSON(p.arguments_display ?? {}));
      args.title = visible(argsPreview(p.arguments_display, 400));
      card.appendChild(args);
    }

    const editor = ownKeys(el(doc, 'textarea', 'jp-mod-styled chaz-edit-box'));
    editor.spellcheck = false;
    editor.value = this._edits.get(p.request_id) ?? editText(p.arguments_display);
    editor.rows = Math.min(Math.max(editor.value.split('\n').length + 1, 4), 24);
    editor.hidden = !this._edits.has(p.request_id);
    editor.addEventListener('input', () => {
      this._edits.set(p.request_id, editor.value);
    });

    const reason = ownKeys(el(doc, 'input', 'jp-mod-styled chaz-reason'));
    reason.type = 'text';
    reason.placeholder = 'reason for Deny (optional)';
    reason.value = this._reasons.get(p.request_id) ?? '';
    reason.addEventListener('input', () => {
      this._reasons.set(p.request_id, reason.value);
    });
    card.appendChild(reason);

    const buttons = el(doc, 'div', 'chaz-card-buttons');
    const approve = el(doc, 'button', 'jp-Button jp-mod-styled jp-mod-accept chaz-approve', 'Approve');
    approve.addEventListener('click', () => this._decide(p, 'approve', null));
    if (check.refused && code !== null) {
      approve.disabled = true;
      approve.dataset.refused = 'true'; // stays disabled when the kernel refuses another click
      approve.title = 'Approve is refused for this code as shown: Edit it, then Approve edited';
    }
    const deny = el(doc, 'button', 'jp-Button jp-mod-styled jp-mod-warn chaz-deny', 'Deny');
    deny.addEventListener('click', () =>
      this._decide(p, 'deny', reason.value.trim() || null)
    );
    const edit = el(doc, 'button', 'jp-Button jp-mod-styled chaz-edit', 'Edit');
    edit.title = code !== null ? 'Edit the code before approving' : 'Edit the arguments (JSON) before approving';
    const approveEdited = el(doc, 'button', 'jp-Button jp-mod-styled jp-mod-accept chaz-approve-edited', 'Approve edited');
    approveEdited.title = 'Run this call once with the arguments as edited (checked against the tool\'s schema)';
    approveEdited.hidden = editor.hidden;
    edit.addEventListener('click', () => {
      editor.hidden = !editor.hidden;
      approveEdited.hidden = editor.hidden;
      if (!editor.hidden) {
        this._edits.set(p.request_id, editor.value);
        editor.focus();
      } else {
        this._edits.delete(p.request_id);
      }
    });
    approveEdited.addEventListener('click', () => this.approveEdited(p.request_id));
    buttons.appendChild(approve);
    buttons.appendChild(deny);
    if (p.kind === 'egress') {
      // may the notebook's data leave (server/egress_gate.py): nothing to edit
      const to = String((p.arguments_display ?? {}).to ?? p.tool_name);
      meta.textContent = `${p.agent} would send the notebook's data to ${to} · session ${p.session_id}`;
      approve.textContent = 'Allow once';
      approve.title = 'Send this data to the model once';
      deny.title = 'Keep it in the kernel: the model reads one line saying it was withheld';
      const session = el(doc, 'button', 'jp-Button jp-mod-styled chaz-allow-session', 'Allow for this session');
      session.title = "Send it, and the agent's later data to this host in this session";
      session.addEventListener('click', () => this._decide(p, 'approve_all', null));
      buttons.appendChild(session);
    } else {
      buttons.appendChild(edit);
    }
    card.appendChild(buttons);
    card.appendChild(editor);
    card.appendChild(approveEdited);
    card.appendChild(el(doc, 'div', 'chaz-card-error'));
    return card;
  }

  private _renderSessions(sessions: ISessionSummary[], connected: boolean): void {
    const doc = this.node.ownerDocument;
    this._sessionsTitle.textContent = `Sessions (${sessions.length})`;
    this._sessionList.replaceChildren();
    for (const s of sessions) {
      const li = el(doc, 'li', 'chaz-session');
      li.dataset.sessionId = String(s.id);
      li.title = `Open the chat of session ${s.id}`;
      li.addEventListener('click', ev => {
        if (!(ev.target as HTMLElement | null)?.closest('button')) {
          this.openChat(s.id);
        }
      });
      const head = el(doc, 'div', 'chaz-session-head');
      head.appendChild(el(doc, 'span', 'chaz-session-id', `#${s.id}`));
      head.appendChild(el(doc, 'span', 'chaz-agent', s.agent));
      if (s.kind && s.kind !== 'chat') {
        head.appendChild(el(doc, 'span', 'chaz-kind', s.kind));
      }
      const status = String(s.status ?? '');
      head.appendChild(
        el(doc, 'span', `chaz-status chaz-status-${status.replace(/[^a-z]/gi, '')}`, status)
      );
      if (status === 'running' || status === 'parked') {
        const stop = el(doc, 'button', 'jp-Button jp-mod-styled jp-mod-warn chaz-stop', 'Stop');
        stop.title = `Stop the run of session ${s.id} (%chaz stop ${s.id})`;
        stop.disabled = this._stopping.has(s.id);
        stop.addEventListener('click', () => this.stopSession(s.id));
        head.appendChild(stop);
      } else {
        this._stopping.delete(s.id); // that run is over: a later one may be stopped again
      }
      li.appendChild(head);
      const last = s.last_entry;
      if (last) {
        const line = el(doc, 'div', 'chaz-session-last');
        line.appendChild(el(doc, 'span', 'chaz-badge', last.type));
        line.appendChild(el(doc, 'span', 'chaz-sender', last.sender));
        const content = String(last.content ?? '').replace(/\s+/g, ' ');
        line.appendChild(
          el(doc, 'span', 'chaz-session-text', content.length > 160 ? content.slice(0, 159) + '…' : content)
        );
        if (last.created_at) {
          line.title = String(last.created_at);
        }
        li.appendChild(line);
      }
      if (typeof s.streaming === 'string' && s.streaming) {
        // the reply being written (text, never HTML); the state without it follows its entry
        const line = el(doc, 'div', 'chaz-session-last chaz-session-streaming');
        line.appendChild(el(doc, 'span', 'chaz-badge', 'writing'));
        const text = s.streaming.replace(/\s+/g, ' ');
        line.appendChild(el(doc, 'span', 'chaz-session-text', text.length > 160 ? '…' + text.slice(-159) : text));
        li.appendChild(line);
      }
      this._sessionList.appendChild(li);
    }
    if (sessions.length === 0) {
      this._sessionList.appendChild(
        el(doc, 'li', 'chaz-empty', connected ? 'No sessions yet.' : '—')
      );
    }
  }

  /** "New chat with [@NAME]": the agents the kernel defines. */
  private _renderNewChat(agents: string[]): void {
    const doc = this.node.ownerDocument;
    const names = agents.filter(isAgentName);
    const key = names.join(' ');
    if (key === this._agentsKey) {
      return; // keep the choice being made
    }
    this._agentsKey = key;
    this._newChat.replaceChildren();
    if (!names.length) {
      return;
    }
    const select = el(doc, 'select', 'jp-mod-styled chaz-new-agent');
    for (const name of names) {
      const option = el(doc, 'option', undefined, `@${name}`);
      option.value = name;
      select.appendChild(option);
    }
    const start = el(doc, 'button', 'jp-Button jp-mod-styled chaz-new-chat-button', 'New chat');
    start.type = 'button';
    start.title = 'A new session with this agent (as %chaz new @NAME), started by its first message';
    start.addEventListener('click', () => this.newChat(select.value));
    this._newChat.appendChild(el(doc, 'span', 'chaz-new-chat-label', 'New chat with'));
    this._newChat.appendChild(select);
    this._newChat.appendChild(start);
  }

  private _client: ChazClient;
  private _chat: ChatView;
  private _newChat: HTMLElement;
  private _agentsKey = '';
  private _noticeTimer: number | null = null;
  private _pathSource: IPathSource | null = null;
  private _target: HTMLElement;
  private _statusNode: HTMLElement;
  private _notice: HTMLElement;
  private _pendingTitle: HTMLElement;
  private _pendingList: HTMLElement;
  private _sessionsTitle: HTMLElement;
  private _sessionList: HTMLElement;
  private _cards = new Map<string, HTMLElement>();
  private _reasons = new Map<string, string>();
  /** the Edit box's text of each card whose box is open (kept across updates) */
  private _edits = new Map<string, string>();
  private _stopping = new Set<number>();
}
