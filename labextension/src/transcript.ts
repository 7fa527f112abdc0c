/**
 * Pure DOM rendering of a chaz session transcript bundle.
 *
 * No JupyterLab imports here: this module is used by the MIME renderer and is
 * unit tested in jsdom. Every agent/tool/user authored string goes into the DOM
 * through `textContent` (see `el`), never through innerHTML, with its control, bidi and
 * zero-width characters named (`<U+202E>`), so none can reorder or hide text.
 */
import { codeOf, renderChips, renderCodeBlock, visible } from './code';
import { EarlierLoader, IEntry, IPage, ISessionBundle } from './types';

/** Longest tool output / argument text drawn in full; the rest is elided. */
export const MAX_TEXT = 20000;

/** A row of the rendered transcript after folding. */
export type TranscriptItem =
  | { kind: 'entry'; entry: IEntry }
  | {
      kind: 'tool';
      call: IEntry | null;
      result: IEntry | null;
      /** the ApprovalRequest that gated the call, and its decision */
      request?: IEntry | null;
      decision?: IEntry | null;
    }
  | { kind: 'approval'; request: IEntry | null; decision: IEntry | null };

/** Create an element with a class and optional text (set via textContent, controls named: `visible`). */
export function el<K extends keyof HTMLElementTagNameMap>(
  doc: Document,
  tag: K,
  className?: string,
  text?: string | null
): HTMLElementTagNameMap[K] {
  const node = doc.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined && text !== null) {
    node.textContent = visible(text);
  }
  return node;
}

/** Pretty JSON for arguments; never throws. */
export function formatJSON(value: unknown): string {
  if (value === undefined) {
    return '';
  }
  if (typeof value === 'string') {
    return value;
  }
  try {
    const text = JSON.stringify(value, null, 2);
    return text === undefined ? String(value) : text;
  } catch {
    return String(value);
  }
}

/** One-line preview of tool arguments: `a=1, b="x"`, cut at `max` characters. */
export function argsPreview(args: unknown, max = 80): string {
  let text: string;
  if (args && typeof args === 'object' && !Array.isArray(args)) {
    text = Object.entries(args as { [k: string]: unknown })
      .map(([k, v]) => {
        let shown: string;
        try {
          shown = JSON.stringify(v);
        } catch {
          shown = String(v);
        }
        return `${k}=${shown === undefined ? String(v) : shown}`;
      })
      .join(', ');
  } else if (args === undefined || args === null) {
    text = '';
  } else {
    text = formatJSON(args).replace(/\s+/g, ' ');
  }
  return text.length > max ? text.slice(0, max - 1) + '…' : text;
}

/** `6.9 ms`, `14 ms`, `1.2 s`, `2 min 5 s`; empty for a missing duration. */
export function formatDuration(ms: unknown): string {
  if (typeof ms !== 'number' || !isFinite(ms) || ms < 0) {
    return '';
  }
  if (ms < 10) {
    return `${ms.toFixed(1)} ms`;
  }
  if (ms < 1000) {
    return `${Math.round(ms)} ms`;
  }
  if (ms < 60000) {
    return `${(ms / 1000).toFixed(1)} s`;
  }
  const minutes = Math.floor(ms / 60000);
  const seconds = Math.round((ms % 60000) / 1000);
  return `${minutes} min ${seconds} s`;
}

/**
 * How long a tool call took, its run and the wait for a person named apart: a ToolResult's
 * `duration_ms` includes `approval_wait_ms`, so an approved call reads
 * `ran 6.9 ms after 9.8 s waiting for approval`; a call nobody approved reads `14 ms`.
 */
export function toolTiming(payload: { [key: string]: any }): string {
  const total = payload.duration_ms;
  if (typeof total !== 'number' || !isFinite(total)) {
    return '';
  }
  const wait = payload.approval_wait_ms;
  if (typeof wait !== 'number' || !isFinite(wait) || wait <= 0) {
    return formatDuration(total);
  }
  return `ran ${formatDuration(Math.max(total - wait, 0))} after ${formatDuration(wait)} waiting for approval`;
}

/** `6 entries`, or `3 entries in this cell` for a view of one cell's part of a run. */
export function countLabel(n: number, cell: boolean): string {
  return `${n.toLocaleString('en-US')} ${n === 1 ? 'entry' : 'entries'}${cell ? ' in this cell' : ''}`;
}

/**
 * The Acks of runs that are over: a later Message or Error (not a note) from the same sender,
 * a later Ack of the same sender (a new run, or the run's closing Ack), or an idle session.
 * Those are not shown as "… is working" (only an Ack that says more is kept).
 */
export function endedAcks(entries: IEntry[], status: string): Set<IEntry> {
  const ended = new Set<IEntry>();
  const open = new Map<string, IEntry>();
  for (const e of entries) {
    const sender = String(e.sender ?? '');
    const mine = open.get(sender);
    const ends =
      e.type === 'Ack' ||
      e.type === 'Message' ||
      (e.type === 'Error' && !payloadOf(e).note);
    if (mine && ends) {
      ended.add(mine);
      open.delete(sender);
    }
    if (e.type === 'Ack') {
      open.set(sender, e);
    }
  }
  if (status === 'idle') {
    open.forEach(ack => ended.add(ack));
  }
  return ended;
}

/** `HH:MM:SS` of an ISO timestamp, without timezone conversion. */
export function formatTime(createdAt: unknown): string {
  if (typeof createdAt !== 'string') {
    return '';
  }
  const m = /T(\d{2}:\d{2}:\d{2})/.exec(createdAt);
  return m ? m[1] : createdAt;
}

/** Cut a long text, saying how much was left out. */
export function clip(text: string, max = MAX_TEXT): string {
  if (text.length <= max) {
    return text;
  }
  return `${text.slice(0, max)}\n… (${text.length - max} more characters)`;
}

function str(value: unknown): string {
  if (value === undefined || value === null) {
    return '';
  }
  return typeof value === 'string' ? value : formatJSON(value);
}

function payloadOf(entry: IEntry | null): { [key: string]: any } {
  const p = entry?.payload;
  return p && typeof p === 'object' ? p : {};
}

/**
 * Fold a list of entries into transcript rows, in seq order: a ToolCall and
 * what belongs to it (its ToolResult, same tool_call_id; the ApprovalRequest
 * that gated it and that request's ApprovalDecision) become one row at the
 * position of the call, so a gated call shows once. An ApprovalRequest whose
 * call is not in the bundle and its decision (same payload.request_id) become
 * one approval row. Unmatched halves are kept as rows too. Matching goes in
 * order (the latest open call with that id), so ids reused by a later run do
 * not pick up an earlier run's result.
 */
export function foldEntries(entries: IEntry[]): TranscriptItem[] {
  const ordered = entries
    .map((entry, index) => ({ entry, index }))
    .sort((a, b) => {
      const sa = typeof a.entry.seq === 'number' ? a.entry.seq : a.index;
      const sb = typeof b.entry.seq === 'number' ? b.entry.seq : b.index;
      return sa - sb || a.index - b.index;
    })
    .map(x => x.entry);

  type ToolItem = Extract<TranscriptItem, { kind: 'tool' }>;
  type ApprovalItem = Extract<TranscriptItem, { kind: 'approval' }>;
  const openCalls = new Map<string, ToolItem>();
  const byRequest = new Map<string, ToolItem | ApprovalItem>();
  const items: TranscriptItem[] = [];
  for (const entry of ordered) {
    switch (entry.type) {
      case 'ToolCall': {
        const item: ToolItem = { kind: 'tool', call: entry, result: null, request: null, decision: null };
        if (entry.tool_call_id) {
          openCalls.set(entry.tool_call_id, item);
        }
        items.push(item);
        break;
      }
      case 'ToolResult': {
        const item = entry.tool_call_id ? openCalls.get(entry.tool_call_id) : undefined;
        if (item && !item.result) {
          item.result = entry;
          openCalls.delete(entry.tool_call_id as string);
        } else {
          items.push({ kind: 'tool', call: null, result: entry });
        }
        break;
      }
      case 'ApprovalRequest': {
        const rid = payloadOf(entry).request_id;
        const call = entry.tool_call_id ? openCalls.get(entry.tool_call_id) : undefined;
        let item: ToolItem | ApprovalItem;
        if (call && !call.request && !call.result) {
          call.request = entry;
          item = call;
        } else {
          item = { kind: 'approval', request: entry, decision: null };
          items.push(item);
        }
        if (typeof rid === 'string') {
          byRequest.set(rid, item);
        }
        break;
      }
      case 'ApprovalDecision': {
        const rid = payloadOf(entry).request_id;
        const item = typeof rid === 'string' ? byRequest.get(rid) : undefined;
        if (item && !item.decision) {
          item.decision = entry;
        } else if (!item && entry.tool_call_id && !openCalls.has(entry.tool_call_id)) {
          // the decision on a call an earlier cell's view shows: its result joins this row
          const row: ToolItem = { kind: 'tool', call: null, result: null, request: null, decision: entry };
          openCalls.set(entry.tool_call_id, row);
          items.push(row);
        } else if (!item) {
          items.push({ kind: 'approval', request: null, decision: entry });
        }
        break;
      }
      default:
        items.push({ kind: 'entry', entry });
    }
  }
  return items;
}

/** `answers 3 messages together` for an Ack whose run answers several Messages; else ''. */
export function answersTogether(ack: IEntry): string {
  const n = payloadOf(ack).answers_count;
  return typeof n === 'number' && n > 1 ? `answers ${n} messages together` : '';
}

/**
 * An entry's seq as `#N` (what `%chaz fork SESSION --at N` takes), as the kernel's views and
 * `%chaz log` show it; null unless the seq is a whole number (nothing else is drawn).
 */
export function seqSpan(doc: Document, seq: unknown): HTMLElement | null {
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 0) {
    return null;
  }
  const span = el(doc, 'span', 'chaz-seq', `#${seq}`);
  span.title = `entry #${seq} of the session: %chaz fork SESSION --at ${seq} branches from here`;
  return span;
}

function entryHead(
  doc: Document,
  badge: string,
  type: string,
  sender: string | null,
  createdAt?: string | null,
  seq?: unknown
): HTMLElement {
  const head = el(doc, 'div', 'chaz-entry-head');
  const n = seqSpan(doc, seq);
  if (n) {
    head.appendChild(n);
  }
  const b = el(doc, 'span', `chaz-badge chaz-badge-${type.toLowerCase()}`, badge);
  head.appendChild(b);
  if (sender) {
    head.appendChild(el(doc, 'span', 'chaz-sender', sender));
  }
  const time = formatTime(createdAt);
  if (time) {
    const t = el(doc, 'span', 'chaz-time', time);
    t.title = visible(String(createdAt));
    head.appendChild(t);
  }
  return head;
}

function renderPlainEntry(
  doc: Document,
  entry: IEntry,
  agent: string,
  ended = false
): HTMLElement | null {
  const type = String(entry.type || 'Entry');
  if (type === 'Ack' && (payloadOf(entry).ledger || payloadOf(entry).compaction)) {
    return null; // a record of what a compaction or the egress gate sends (data_egress): no run
  }
  if (type === 'Ack' && ended) {
    // a run that is over: its Ack no longer says "… is working"; kept only when it says more
    const p = payloadOf(entry);
    const closing = p.status === 'cancelled' || p.status === 'silent';
    if (!closing && !answersTogether(entry) && !(typeof p.partial_text === 'string' && p.partial_text)) {
      return null;
    }
  }
  if (type === 'Summary') {
    const node = el(doc, 'div', 'chaz-entry chaz-summary');
    node.dataset.type = type;
    const line = el(doc, 'div', 'chaz-summary-line');
    const n = seqSpan(doc, entry.seq);
    if (n) {
      line.appendChild(n);
    }
    line.appendChild(el(doc, 'span', 'chaz-summary-label', 'Summary (context starts here)'));
    node.appendChild(line);
    if (entry.content) {
      const details = el(doc, 'details', 'chaz-summary-details');
      details.appendChild(el(doc, 'summary', undefined, 'summary text'));
      details.appendChild(el(doc, 'div', 'chaz-content', entry.content));
      node.appendChild(details);
    }
    return node;
  }
  const node = el(doc, 'div', `chaz-entry chaz-type-${type.toLowerCase()}`);
  node.dataset.type = type;
  if (entry.sender && entry.sender === agent) {
    node.classList.add('chaz-from-agent');
  }
  node.appendChild(entryHead(doc, type, type, entry.sender, entry.created_at, entry.seq));
  const closes = type === 'Ack' && ['cancelled', 'silent'].includes(String(payloadOf(entry).status ?? ''));
  if (entry.content && (type !== 'Ack' || !ended || closes)) {
    node.appendChild(el(doc, 'div', 'chaz-content', entry.content));
  }
  if (type === 'Message') {
    // variables sent with the message (`%chaz @NAME --with a,b ...`)
    const chips = renderChips(doc, payloadOf(entry).attachments);
    if (chips) {
      node.appendChild(chips);
    }
  }
  if (type === 'Ack') {
    const together = answersTogether(entry);
    if (together) {
      node.appendChild(el(doc, 'div', 'chaz-answers', `↳ ${together}`));
    }
    // a stopped run keeps the reply text it had streamed (payload.partial_text): still shown
    const partial = payloadOf(entry).partial_text;
    if (typeof partial === 'string' && partial) {
      node.classList.add('chaz-stopped');
      node.appendChild(el(doc, 'div', 'chaz-partial-kept', `it had written: ${clip(partial)}`));
    }
  }
  return node;
}

function renderTool(
  doc: Document,
  call: IEntry | null,
  result: IEntry | null,
  request: IEntry | null = null,
  decision: IEntry | null = null,
  agent = ''
): HTMLElement {
  const callPayload = payloadOf(call);
  const resultPayload = payloadOf(result);
  const isError = !!resultPayload.is_error;
  // approved with edits: the tool ran with the approver's arguments (the ToolResult's), which
  // the row shows first; the model's proposal under them (as the kernel's views do)
  const edited = !!resultPayload.edited && resultPayload.arguments !== undefined;
  const ran = edited ? resultPayload.arguments : callPayload.arguments;
  const name =
    call?.tool_name || result?.tool_name || decision?.tool_name || payloadOf(decision).tool_name || 'tool';

  const node = el(doc, 'details', 'chaz-entry chaz-tool');
  node.dataset.type = 'ToolCall';
  if (isError) {
    node.classList.add('chaz-tool-error');
  }
  if (!result) {
    node.classList.add('chaz-tool-pending');
  }
  const summary = el(doc, 'summary', 'chaz-tool-summary');
  const n = seqSpan(doc, (call || result)?.seq);
  if (n) {
    summary.appendChild(n);
  }
  summary.appendChild(el(doc, 'span', 'chaz-badge chaz-badge-tool', 'Tool'));
  summary.appendChild(el(doc, 'span', 'chaz-tool-name', name));
  if (call) {
    summary.appendChild(
      el(doc, 'span', 'chaz-tool-args', `(${argsPreview(ran)})`)
    );
  }
  if (request || decision) {
    const approval = decision ? describeDecision(decision) : 'waiting for approval';
    const cls = decision ? `chaz-tool-approval chaz-approval-${String(payloadOf(decision).decision ?? '').replace(/[^a-z_]/gi, '')}` : 'chaz-tool-approval chaz-tool-waiting';
    summary.appendChild(el(doc, 'span', cls, approval));
  }
  let state: string;
  if (!result) {
    state = request && !decision ? '' : 'no result yet';
  } else {
    state = isError ? 'error' : 'ok';
    const timing = toolTiming(resultPayload);
    if (timing) {
      state += ` · ${timing}`;
    }
  }
  if (state) {
    summary.appendChild(el(doc, 'span', 'chaz-tool-state', state));
  }
  if (result) {
    const out = resultPayload.output !== undefined ? str(resultPayload.output) : result.content || '';
    summary.appendChild(el(doc, 'span', 'chaz-tool-out', `→ ${argsPreview(out)}`));
  }
  // the session's agent made the call: its name is not repeated; another agent's call says whose
  const who = call?.sender || result?.sender;
  if (who && agent && who !== agent) {
    summary.appendChild(el(doc, 'span', 'chaz-tool-by', `called by ${who}`));
  }
  node.appendChild(summary);

  const body = el(doc, 'div', 'chaz-tool-body');
  if (edited) {
    appendArguments(doc, body, ran, 'ran as edited by the approver');
    if (call) {
      appendArguments(doc, body, callPayload.arguments, 'proposed by the model');
    }
  } else if (call) {
    appendArguments(doc, body, callPayload.arguments, 'arguments');
  }
  if (result) {
    const output =
      resultPayload.output !== undefined ? str(resultPayload.output) : result.content;
    body.appendChild(el(doc, 'div', 'chaz-label', isError ? 'error' : 'output'));
    body.appendChild(el(doc, 'pre', 'chaz-pre chaz-tool-output', clip(output || '')));
  }
  node.appendChild(body);
  return node;
}

/**
 * A call's arguments under a label: the code of a code call (`kernel__run`) as a code block
 * with Copy / "Insert as cell below", else indented JSON; hidden characters named.
 */
function appendArguments(doc: Document, body: HTMLElement, args: unknown, label: string): void {
  const code = codeOf(args);
  if (code !== null) {
    body.appendChild(el(doc, 'div', 'chaz-label', label === 'arguments' ? 'code' : label));
    body.appendChild(renderCodeBlock(doc, code));
    return;
  }
  body.appendChild(el(doc, 'div', 'chaz-label', label));
  body.appendChild(el(doc, 'pre', 'chaz-pre chaz-tool-arguments', clip(formatJSON(args ?? {}))));
}

/** Words for an ApprovalDecision outcome. */
export function describeDecision(decision: IEntry | null): string {
  if (!decision) {
    return 'pending';
  }
  const p = payloadOf(decision);
  const by = p.decided_by || decision.sender;
  let text: string;
  switch (p.decision) {
    case 'approve':
      text = p.edited ? 'approved with edited arguments' : 'approved';
      break;
    case 'approve_all':
      text = 'approved (all further calls)';
      break;
    case 'deny':
      text = 'denied';
      break;
    case 'timed_out':
      text = 'timed out';
      break;
    default:
      text = String(p.decision ?? 'decided');
  }
  if (by && p.decision !== 'timed_out') {
    text += ` by ${by}`;
  }
  if (p.reason) {
    text += `: ${p.reason}`;
  }
  return text;
}

function renderApproval(
  doc: Document,
  request: IEntry | null,
  decision: IEntry | null
): HTMLElement {
  const rp = payloadOf(request);
  const dp = payloadOf(decision);
  const node = el(doc, 'div', 'chaz-entry chaz-approval');
  node.dataset.type = 'ApprovalRequest';
  const outcome = decision ? String(dp.decision ?? 'decided') : 'pending';
  node.classList.add(`chaz-approval-${outcome.replace(/[^a-z_]/gi, '')}`);

  const head = entryHead(
    doc,
    'Approval',
    'approval',
    String(rp.agent || request?.sender || decision?.sender || ''),
    (request || decision)?.created_at,
    (request || decision)?.seq
  );
  // tool name and risk go right after the sender, before the time
  const time = head.querySelector('.chaz-time');
  const toolName = rp.tool_name || request?.tool_name || decision?.tool_name;
  if (toolName) {
    head.insertBefore(el(doc, 'span', 'chaz-tool-name', String(toolName)), time);
  }
  if (rp.risk_level) {
    const risk = String(rp.risk_level);
    head.insertBefore(
      el(doc, 'span', `chaz-risk chaz-risk-${risk.replace(/[^a-z]/gi, '')}`, `${risk} risk`),
      time
    );
  }
  node.appendChild(head);
  const code = request ? codeOf(rp.arguments_display) : null;
  if (code !== null) {
    node.appendChild(renderCodeBlock(doc, code));
  } else if (request && rp.arguments_display !== undefined) {
    node.appendChild(el(doc, 'pre', 'chaz-pre chaz-approval-args', clip(formatJSON(rp.arguments_display))));
  } else if (request?.content) {
    node.appendChild(el(doc, 'div', 'chaz-content', request.content));
  }
  node.appendChild(el(doc, 'div', 'chaz-approval-outcome', describeDecision(decision)));
  return node;
}

/** Is this value shaped like a session bundle? */
export function isSessionBundle(value: unknown): value is ISessionBundle {
  if (!value || typeof value !== 'object') {
    return false;
  }
  const v = value as { [k: string]: unknown };
  return (
    Array.isArray(v.entries) &&
    !!v.session &&
    typeof v.session === 'object'
  );
}

/**
 * The reply a run is streaming (the bundle's `stream`): a block under the entries, its text
 * as text (never HTML). The kernel updates the output as the text grows (throttled) and drops
 * `stream` when the reply's Message lands, so the entry replaces this block.
 */
export function renderPartial(doc: Document, stream: unknown): HTMLElement | null {
  if (!stream || typeof stream !== 'object') {
    return null;
  }
  const s = stream as { [k: string]: unknown };
  if (typeof s.text !== 'string' || !s.text) {
    return null;
  }
  const row = el(doc, 'div', 'chaz-entry chaz-partial chaz-from-agent');
  row.appendChild(el(doc, 'span', 'chaz-sender', str(s.sender)));
  row.appendChild(el(doc, 'span', 'chaz-content', clip(s.text)));
  row.appendChild(el(doc, 'span', 'chaz-writing', 'writing…'));
  return row;
}

/** How a transcript gets its earlier pages ("show earlier"). */
export interface ITranscriptOptions {
  /** asks the kernel for the page before a seq; without it the control shows the command */
  loadEarlier?: EarlierLoader | null;
  /** earlier pages loaded already (kept by the renderer across updates of the output) */
  loaded?: IPage | null;
  /** told each time "show earlier" loaded a page, with the bundle as it is drawn now */
  onLoaded?: (shown: ISessionBundle) => void;
}

/** How many entries come before the first one shown (the bundle's `earlier`). */
export function earlierCount(bundle: ISessionBundle): number {
  const n = bundle.earlier;
  return typeof n === 'number' && isFinite(n) && n > 0 ? Math.floor(n) : 0;
}

/** `%chaz log 3 --before 71`: the bundle's command, moved to a new first seq. */
export function earlierCommand(bundle: ISessionBundle, firstSeq: number): string {
  const given = typeof bundle.earlier_command === 'string' ? bundle.earlier_command : '';
  if (/--before \d+/.test(given)) {
    return given.replace(/--before \d+/, `--before ${firstSeq}`);
  }
  return `%chaz log ${bundle.session.id} --before ${firstSeq}`;
}

/** The bundle with a loaded earlier page in front of its entries. */
export function withEarlier(bundle: ISessionBundle, page: IPage | null | undefined): ISessionBundle {
  const first = bundle.first_seq;
  if (!page || typeof first !== 'number') {
    return bundle;
  }
  const after = typeof bundle.after_seq === 'number' ? bundle.after_seq : 0;
  const older = page.entries.filter(e => typeof e.seq === 'number' && e.seq < first && e.seq > after);
  if (!older.length) {
    return { ...bundle, earlier: 0 };
  }
  const firstSeq = older[0].seq;
  return {
    ...bundle,
    entries: [...older, ...bundle.entries],
    first_seq: firstSeq,
    // seqs are gapless from 1: the entries (after the turn's start) before the first one shown
    earlier: Math.max(0, firstSeq - 1 - after),
    earlier_command: earlierCommand(bundle, firstSeq)
  };
}

/**
 * The "show earlier" row: how many entries come before the first one shown, the command
 * that shows them, and (with a loader) a button that loads the previous page in place.
 */
function renderEarlier(
  doc: Document,
  bundle: ISessionBundle,
  load: (() => Promise<boolean>) | null
): HTMLElement {
  const n = earlierCount(bundle);
  const row = el(doc, 'div', 'chaz-earlier');
  row.appendChild(el(doc, 'span', 'chaz-earlier-count', `${n} earlier ${n === 1 ? 'entry' : 'entries'}`));
  const first = typeof bundle.first_seq === 'number' ? bundle.first_seq : null;
  const command = first !== null ? earlierCommand(bundle, first) : '';
  const hint = el(doc, 'span', 'chaz-earlier-command', command ? `${command} (or --all)` : '');
  if (load) {
    const button = el(doc, 'button', 'chaz-earlier-button', 'show earlier');
    button.type = 'button';
    button.title = command;
    button.addEventListener('click', () => {
      button.disabled = true;
      button.textContent = 'loading…';
      void load().then(ok => {
        if (!ok) {
          // no kernel answered: say how to see them instead
          button.disabled = false;
          button.textContent = 'show earlier';
          hint.textContent = command ? `no kernel to ask; run ${command}` : 'no kernel to ask';
        }
      });
    });
    row.appendChild(button);
  }
  row.appendChild(hint);
  return row;
}

/** Render a whole session bundle into a new element. */
export function renderTranscript(
  bundle: unknown,
  doc: Document = document,
  options: ITranscriptOptions = {}
): HTMLElement {
  let value = bundle;
  if (typeof value === 'string') {
    try {
      value = JSON.parse(value);
    } catch {
      /* handled below */
    }
  }
  const root = el(doc, 'div', 'chaz-transcript');
  if (!isSessionBundle(value)) {
    root.classList.add('chaz-invalid');
    root.appendChild(el(doc, 'div', 'chaz-entry chaz-type-error', 'chaz: this output is not a session transcript this version can read.'));
    return root;
  }
  drawTranscript(root, withEarlier(value, options.loaded), doc, options);
  return root;
}

function drawTranscript(
  root: HTMLElement,
  value: ISessionBundle,
  doc: Document,
  options: ITranscriptOptions
): void {
  root.replaceChildren();
  const session = value.session;
  const status = String(value.status || 'idle');
  root.dataset.sessionId = String(session.id);

  const header = el(doc, 'div', 'chaz-header');
  header.appendChild(el(doc, 'span', 'chaz-title', `Session ${session.id}`));
  header.appendChild(el(doc, 'span', 'chaz-agent', String(session.agent ?? '')));
  if (session.kind) {
    header.appendChild(el(doc, 'span', 'chaz-kind', String(session.kind)));
  }
  if (session.parent_id !== null && session.parent_id !== undefined) {
    header.appendChild(el(doc, 'span', 'chaz-parent', `child of ${session.parent_id}`));
  }
  if (session.forked_from !== null && session.forked_from !== undefined) {
    // a fork (server/fork.py): where its log comes from
    header.appendChild(
      el(doc, 'span', 'chaz-forked', `forked from session ${session.forked_from} at #${session.forked_at_seq ?? 0}`)
    );
  }
  const title = value.title;
  if (typeof title === 'string' && title) {
    header.appendChild(el(doc, 'span', 'chaz-kind chaz-view-title', title));
  }
  header.appendChild(
    el(doc, 'span', `chaz-status chaz-status-${status.replace(/[^a-z]/gi, '')}`, status)
  );
  const n = value.entries.length;
  const cell = value.scope === 'cell';
  // the kernel's count of the rows shown ("2 rows (4 entries) in this cell") where it sends one
  const label = typeof value.count_label === 'string' ? value.count_label : countLabel(n, cell);
  header.appendChild(el(doc, 'span', 'chaz-count', label));
  root.appendChild(header);

  const loader = options.loadEarlier ?? null;
  const first = value.first_seq;
  if (earlierCount(value) > 0) {
    const load =
      loader && typeof first === 'number'
        ? async (): Promise<boolean> => {
            let page: IPage | null = null;
            try {
              page = await loader(Number(session.id), first);
            } catch {
              page = null;
            }
            if (!page) {
              return false;
            }
            const next = withEarlier(value, page);
            options.onLoaded?.(next);
            drawTranscript(root, next, doc, options);
            return true;
          }
        : null;
    root.appendChild(renderEarlier(doc, value, load));
  }

  const list = el(doc, 'div', 'chaz-entries');
  const agent = String(session.agent ?? '');
  const ended = endedAcks(value.entries, status);
  for (const item of foldEntries(value.entries)) {
    if (item.kind === 'tool') {
      const request = item.request ?? null;
      const decision = item.decision ?? null;
      list.appendChild(renderTool(doc, item.call, item.result, request, decision, agent));
      if (request && !decision) {
        // the one approval card, right under the call it gates
        list.appendChild(renderApproval(doc, request, null));
      }
    } else if (item.kind === 'approval') {
      list.appendChild(renderApproval(doc, item.request, item.decision));
    } else {
      const row = renderPlainEntry(doc, item.entry, agent, ended.has(item.entry));
      if (row) {
        list.appendChild(row);
      }
    }
  }
  const partial = renderPartial(doc, (value as { stream?: unknown }).stream);
  if (partial) {
    list.appendChild(partial);
  } else if (n === 0) {
    list.appendChild(el(doc, 'div', 'chaz-empty', 'no entries yet'));
  }
  root.appendChild(list);
  const footer = (value as { footer?: unknown }).footer;
  if (typeof footer === 'string' && footer) {
    root.appendChild(el(doc, 'div', 'chaz-footer', footer));
  }
}
