/**
 * The chat of the "Chaz" sidebar: one session's live transcript, drawn by the cell view's
 * renderer (./transcript), its pending approval cards and Stop inline, and a message box
 * that writes a Message to the session (kernel side: chaz_nb/notebook/labchat.py).
 *
 * The box: Enter sends, Shift+Enter is a new line, a leading `@NAME` picks the agent (its
 * current session; in a room, the member who answers). A new chat (no session yet) writes
 * its first Message to a fresh session of its agent.
 *
 * Everything the kernel sends is checked (`chatMessage`, `sentMessage`) and every string of
 * an entry is made visible before it is drawn (`visible`: control characters, ANSI escapes,
 * bidi and zero-width characters are shown by name), and drawn as text, never as HTML.
 *
 * Pure DOM, no JupyterLab imports (unit tested in jsdom).
 */
import { visible } from './code';
import { ownKeys } from './keys';

export { visible };
import { el, isSessionBundle, renderPartial, renderTranscript } from './transcript';
import {
  EarlierLoader,
  FrontendToKernel,
  IChatMessage,
  IEntry,
  IPage,
  ISentMessage,
  ISessionBundle,
  IStreamPartial
} from './types';

/** The longest Message the box sends (the kernel refuses longer ones too). */
export const MAX_MESSAGE_CHARS = 100000;
/** Entries kept in the chat (older ones are dropped from the view; "show earlier" is the log). */
export const MAX_CHAT_ENTRIES = 2000;

const AGENT_AT_START = /^\s*@([A-Za-z][A-Za-z0-9_-]*(?:@[A-Za-z0-9_.-]+)?)(?=\s|$)[ \t]*\n?/;
const AGENT_NAME = /^[A-Za-z][A-Za-z0-9_-]*(?:@[A-Za-z0-9_.-]+)?$/;

/**
 * The box's text as a Message: a leading `@NAME` picks the agent and is not part of the text
 * (as in `%chaz @NAME text`); an `@NAME` anywhere else is text.
 */
export function parseMessage(raw: string): { agent: string | null; text: string } {
  const m = AGENT_AT_START.exec(raw);
  if (!m) {
    return { agent: null, text: raw };
  }
  return { agent: m[1], text: raw.slice(m[0].length) };
}

/** Whether a key press in the box sends it: Enter alone (Shift+Enter is a new line; IME composing is not). */
export function isSendKey(ev: KeyboardEvent): boolean {
  return (
    ev.key === 'Enter' && !ev.shiftKey && !ev.altKey && !ev.ctrlKey && !ev.metaKey && !ev.isComposing
  );
}

/** A JSON value with `visible` applied to every string in it (keys too). */
export function visibleDeep(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') {
    return visible(value);
  }
  if (depth > 40 || value === null || typeof value !== 'object') {
    return value;
  }
  if (Array.isArray(value)) {
    return value.map(v => visibleDeep(v, depth + 1));
  }
  const out: { [k: string]: unknown } = {};
  for (const [k, v] of Object.entries(value as { [k: string]: unknown })) {
    out[visible(k)] = visibleDeep(v, depth + 1);
  }
  return out;
}

function isEntry(value: unknown): value is IEntry {
  const e = value as IEntry;
  return !!e && typeof e === 'object' && typeof e.seq === 'number' && typeof e.type === 'string';
}

function entriesOf(value: unknown): IEntry[] {
  return Array.isArray(value) ? (value.filter(isEntry).map(e => visibleDeep(e)) as IEntry[]) : [];
}

function streamOf(value: unknown): IStreamPartial | null {
  const s = value as IStreamPartial;
  if (!s || typeof s !== 'object' || typeof s.text !== 'string' || !s.text) {
    return null;
  }
  return { run_id: Number(s.run_id) || 0, sender: visible(String(s.sender ?? '')), text: visible(s.text) };
}

function sessionIdOf(value: unknown): number | null {
  return typeof value === 'number' && Number.isInteger(value) ? value : null;
}

/** A `chat` message of the kernel, checked (null when malformed); strings made visible. */
export function chatMessage(data: any): IChatMessage | null {
  if (!data || typeof data !== 'object' || data.type !== 'chat') {
    return null;
  }
  const sessionId = sessionIdOf(data.session_id);
  if (data.ok !== true) {
    return { type: 'chat', ok: false, session_id: sessionId, message: visible(String(data.message ?? '')).slice(0, 500) };
  }
  if (sessionId === null) {
    return null;
  }
  if (data.reset === true) {
    if (!isSessionBundle(data.bundle)) {
      return null;
    }
    const b = data.bundle as ISessionBundle;
    const bundle: ISessionBundle = {
      ...(visibleDeep({ ...b, entries: [], stream: undefined }) as ISessionBundle),
      entries: entriesOf(b.entries),
      stream: streamOf(b.stream) ?? undefined
    };
    if (bundle.session.id !== sessionId) {
      return null;
    }
    return { type: 'chat', ok: true, session_id: sessionId, reset: true, bundle };
  }
  return {
    type: 'chat',
    ok: true,
    session_id: sessionId,
    reset: false,
    entries: entriesOf(data.entries),
    status: typeof data.status === 'string' ? data.status : undefined,
    stream: streamOf(data.stream)
  };
}

/** A `sent` answer of the kernel, checked (null when malformed). */
export function sentMessage(data: any): ISentMessage | null {
  if (!data || typeof data !== 'object' || data.type !== 'sent' || typeof data.ok !== 'boolean') {
    return null;
  }
  return {
    type: 'sent',
    request_id: String(data.request_id ?? '').slice(0, 100),
    ok: data.ok,
    session_id: sessionIdOf(data.session_id),
    message: visible(String(data.message ?? '')).slice(0, 500),
    ...(data.ok === true && data.queued === true ? { queued: true } : {})
  };
}

/** What the chat needs from the sidebar. */
export interface IChatHost {
  /** send a message on the comm; false when not connected */
  send(msg: FrontendToKernel): boolean;
  /** the previous page of a session (the transcript's "show earlier") */
  loadEarlier: EarlierLoader | null;
  /** Stop the session's run (the sidebar's Stop) */
  stop(sessionId: number): void;
  /** whether a stop of the session was asked for and the run goes on */
  isStopping(sessionId: number): boolean;
  /** back to the session list */
  back(): void;
}

export class ChatView {
  constructor(doc: Document, host: IChatHost) {
    this._doc = doc;
    this._host = host;
    this.node = el(doc, 'div', 'chaz-chat');
    this.node.hidden = true;

    const bar = el(doc, 'div', 'chaz-chat-bar');
    const back = el(doc, 'button', 'jp-Button jp-mod-styled chaz-chat-back', '← Sessions');
    back.type = 'button';
    back.title = 'Back to the sessions and approvals';
    back.addEventListener('click', () => host.back());
    bar.appendChild(back);
    this._title = el(doc, 'span', 'chaz-chat-title');
    bar.appendChild(this._title);
    this._stop = el(doc, 'button', 'jp-Button jp-mod-styled jp-mod-warn chaz-stop chaz-chat-stop', 'Stop');
    this._stop.type = 'button';
    this._stop.hidden = true;
    this._stop.addEventListener('click', () => {
      if (this.sessionId !== null) {
        host.stop(this.sessionId);
      }
    });
    bar.appendChild(this._stop);
    this.node.appendChild(bar);

    this._log = el(doc, 'div', 'chaz-chat-log');
    this.node.appendChild(this._log);
    /** the sidebar puts the open approval cards of this session here */
    this.approvals = el(doc, 'div', 'chaz-chat-approvals');
    this.node.appendChild(this.approvals);

    const composer = el(doc, 'div', 'chaz-chat-composer');
    this._box = ownKeys(el(doc, 'textarea', 'jp-mod-styled chaz-chat-input'));
    this._box.rows = 3;
    this._box.maxLength = MAX_MESSAGE_CHARS;
    this._box.spellcheck = true;
    this._box.addEventListener('keydown', ev => {
      if (isSendKey(ev)) {
        ev.preventDefault();
        this.submit();
      }
    });
    composer.appendChild(this._box);
    const row = el(doc, 'div', 'chaz-chat-row');
    row.appendChild(el(doc, 'span', 'chaz-chat-hint', 'Enter sends · Shift+Enter new line · @NAME picks the agent'));
    this._send = el(doc, 'button', 'jp-Button jp-mod-styled jp-mod-accept chaz-chat-send', 'Send');
    this._send.type = 'button';
    this._send.addEventListener('click', () => this.submit());
    row.appendChild(this._send);
    composer.appendChild(row);
    this._error = el(doc, 'div', 'chaz-chat-error');
    composer.appendChild(this._error);
    this.node.appendChild(composer);
  }

  readonly node: HTMLElement;
  readonly approvals: HTMLElement;
  /** the session shown (null: none yet, or a new chat) */
  sessionId: number | null = null;

  /** Whether the chat is showing (a session or a new chat). */
  get active(): boolean {
    return !this.node.hidden;
  }

  /** The agent the box writes to without `@NAME`: the session's, or the new chat's. */
  get agent(): string | null {
    return this._bundle ? String(this._bundle.session.agent ?? '') : this._draftAgent;
  }

  get status(): string {
    return String(this._bundle?.status ?? '');
  }

  /** Follow a session: its transcript arrives from the kernel (`chat` reset). */
  open(sessionId: number): boolean {
    this.node.hidden = false;
    if (sessionId !== this.sessionId) {
      this._bundle = null;
      this._log.replaceChildren(el(this._doc, 'div', 'chaz-empty', 'Loading the transcript…'));
    }
    this.sessionId = sessionId;
    this._draftAgent = null;
    this._drawBar();
    this._box.focus();
    return this._host.send({ type: 'chat_open', session_id: sessionId });
  }

  /** A new chat with `agent`: no session until its first Message is sent. */
  draft(agent: string): void {
    this.node.hidden = false;
    if (this.sessionId !== null) {
      this._host.send({ type: 'chat_close' });
    }
    this.sessionId = null;
    this._bundle = null;
    this._draftAgent = agent;
    this._log.replaceChildren(
      el(this._doc, 'div', 'chaz-empty', `A new chat with @${visible(agent)}: write the first message below.`)
    );
    this._drawBar();
    this._box.focus();
  }

  /** Stop following (the sidebar shows its lists again). */
  close(): void {
    if (this.sessionId !== null) {
      this._host.send({ type: 'chat_close' });
    }
    this.node.hidden = true;
    this.sessionId = null;
    this._bundle = null;
    this._draftAgent = null;
    this._log.replaceChildren();
  }

  /** After a reconnect: follow the session again (the kernel sends it whole); a send in flight got no answer. */
  reopen(): void {
    if (this._waiting !== null) {
      this._waiting = null;
      this._send.disabled = false;
      this._say('The kernel reconnected before it answered: check the transcript, then send again.');
    }
    if (this.active && this.sessionId !== null) {
      this._host.send({ type: 'chat_open', session_id: this.sessionId });
    }
  }

  /** Send the box's text as a Message; false when there is nothing to send or no kernel. */
  submit(): boolean {
    if (this._waiting !== null) {
      return false;
    }
    const raw = this._box.value;
    const { agent, text } = parseMessage(raw);
    if (!text.trim()) {
      this._say(agent ? `Write the message after @${agent}.` : 'Write a message first.');
      return false;
    }
    if (raw.length > MAX_MESSAGE_CHARS) {
      this._say(`The message is over ${MAX_MESSAGE_CHARS.toLocaleString('en')} characters.`);
      return false;
    }
    const requestId = `send-${++this._counter}`;
    const msg: FrontendToKernel =
      this.sessionId === null
        ? { type: 'send', request_id: requestId, text, agent: agent ?? this._draftAgent ?? undefined, new: true }
        : {
            type: 'send',
            request_id: requestId,
            text,
            session_id: this.sessionId,
            ...(agent ? { agent } : {})
          };
    if (msg.type === 'send' && msg.new && !msg.agent) {
      this._say('Start with @NAME: the agent to talk to.');
      return false;
    }
    if (!this._host.send(msg)) {
      this._say('Not connected to a kernel with chaz loaded.');
      return false;
    }
    this._waiting = requestId;
    this._send.disabled = true;
    this._say('Sending…', false);
    return true;
  }

  /** The kernel's answer to a send. */
  onSent(msg: ISentMessage): void {
    if (msg.request_id !== this._waiting) {
      return;
    }
    if (msg.queued) {
      // the kernel runs a cell's own code: the Message is written when it is free (its `sent` follows)
      this._say(msg.message || 'Queued: the kernel is busy; the message is written when it is free.', false);
      return;
    }
    this._waiting = null;
    this._send.disabled = false;
    if (msg.ok) {
      this._box.value = '';
      this._say('');
    } else {
      this._say(msg.message || 'The kernel did not write the message.');
    }
  }

  /** The followed session from the kernel: a whole page (`reset`) or what changed since. */
  onChat(msg: IChatMessage): void {
    if (!this.active) {
      return;
    }
    if (!msg.ok) {
      if (msg.session_id === null || msg.session_id === this.sessionId) {
        this._log.replaceChildren(el(this._doc, 'div', 'chaz-empty', msg.message || 'No such session.'));
      }
      return;
    }
    if (msg.reset && msg.bundle) {
      // the kernel follows the session a Message went to (an @NAME of another agent)
      this.sessionId = msg.session_id;
      this._draftAgent = null;
      this._bundle = msg.bundle;
      this._drawBar();
      this._draw(true);
      return;
    }
    const bundle = this._bundle;
    if (!bundle || msg.session_id !== this.sessionId) {
      return;
    }
    const last = bundle.entries.length ? bundle.entries[bundle.entries.length - 1].seq : 0;
    const fresh = (msg.entries ?? []).filter(e => e.seq > last);
    const status = msg.status ?? bundle.status;
    const changed = fresh.length > 0 || status !== bundle.status;
    let entries = [...bundle.entries, ...fresh];
    let extra = {};
    if (entries.length > MAX_CHAT_ENTRIES) {
      entries = entries.slice(entries.length - MAX_CHAT_ENTRIES);
      const first = entries[0].seq;
      extra = { first_seq: first, earlier: first - 1, earlier_command: `%chaz log ${this.sessionId} --before ${first}` };
    }
    this._bundle = { ...bundle, ...extra, entries, status, stream: msg.stream ?? undefined };
    if (changed) {
      this._drawBar();
      this._draw(false);
    } else {
      this._drawStream();
    }
  }

  /** Redraw the Stop button (after the sidebar's stop state changed). */
  refreshStop(): void {
    this._drawBar();
  }

  private _drawBar(): void {
    const id = this.sessionId;
    const agent = this.agent ?? '';
    const kind = String(this._bundle?.session.kind ?? '');
    this._title.textContent =
      id === null ? `New chat with @${visible(agent)}` : `#${id} @${agent}${kind && kind !== 'chat' ? ` · ${kind}` : ''}`;
    const status = this.status;
    const live = id !== null && (status === 'running' || status === 'parked');
    this._stop.hidden = !live;
    this._stop.disabled = id !== null && this._host.isStopping(id);
    if (id !== null) {
      this._stop.title = `Stop the run of session ${id} (%chaz stop ${id})`;
    }
    this._box.placeholder = agent
      ? `Message @${visible(agent)}${kind === 'room' ? ' (the room)' : ''}`
      : 'Message (@NAME picks the agent)';
  }

  private _loader(): EarlierLoader | null {
    const load = this._host.loadEarlier;
    if (!load) {
      return null;
    }
    // earlier pages are made visible like the rest
    return async (sessionId: number, beforeSeq: number): Promise<IPage | null> => {
      const page = await load(sessionId, beforeSeq);
      return page ? { ...page, entries: entriesOf(page.entries) } : null;
    };
  }

  private _draw(reset: boolean): void {
    const bundle = this._bundle;
    if (!bundle) {
      return;
    }
    const log = this._log;
    const atBottom = reset || log.scrollHeight - log.scrollTop - log.clientHeight < 48;
    const open = reset ? [] : this._openRows();
    const root = renderTranscript(bundle, this._doc, {
      loadEarlier: this._loader(),
      onLoaded: shown => {
        // "show earlier" drew the older page in place: later updates keep it
        this._bundle = { ...shown, stream: this._bundle?.stream };
      }
    });
    log.replaceChildren(root);
    const rows = Array.from(root.querySelectorAll('details'));
    open.forEach(i => rows[i]?.setAttribute('open', ''));
    if (atBottom) {
      log.scrollTop = log.scrollHeight;
    }
  }

  /** Only the streamed reply changed: replace its block, keep the rest as it is. */
  private _drawStream(): void {
    const list = this._log.querySelector('.chaz-entries');
    if (!list) {
      this._draw(false);
      return;
    }
    const log = this._log;
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 48;
    list.querySelectorAll(':scope > .chaz-partial').forEach(n => n.remove());
    const partial = renderPartial(this._doc, this._bundle?.stream);
    if (partial) {
      list.querySelectorAll(':scope > .chaz-empty').forEach(n => n.remove());
      list.appendChild(partial);
    }
    if (atBottom) {
      log.scrollTop = log.scrollHeight;
    }
  }

  /** The indices of the tool rows a person opened (kept across redraws). */
  private _openRows(): number[] {
    const out: number[] = [];
    this._log.querySelectorAll('details').forEach((d, i) => {
      if ((d as HTMLDetailsElement).open) {
        out.push(i);
      }
    });
    return out;
  }

  private _say(text: string, isError = true): void {
    this._error.textContent = text;
    this._error.classList.toggle('chaz-chat-error-text', isError && !!text);
  }

  private _doc: Document;
  private _host: IChatHost;
  private _title: HTMLElement;
  private _stop: HTMLButtonElement;
  private _log: HTMLElement;
  private _box: HTMLTextAreaElement;
  private _send: HTMLButtonElement;
  private _error: HTMLElement;
  private _bundle: ISessionBundle | null = null;
  private _draftAgent: string | null = null;
  private _waiting: string | null = null;
  private _counter = 0;
}

/** Whether `name` is an agent name the kernel accepts (the "new chat" control's list). */
export function isAgentName(name: unknown): name is string {
  return typeof name === 'string' && name.length <= 100 && AGENT_NAME.test(name);
}
