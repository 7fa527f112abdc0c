/**
 * The sidebar's chat (src/chat.ts) against a fake kernel comm (jsdom, no JupyterLab server):
 * Enter sends, Shift+Enter is a new line, @NAME picks the agent, every kernel string is text.
 */
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { chatMessage, isSendKey, parseMessage, sentMessage, visible } from '../src/chat';
import { ChazClient } from '../src/client';
import { ChazPanel, NOTICE_MS } from '../src/sidebar';
import { IEntry, IStateMessage } from '../src/types';

class FakeComm {
  onMsg: (msg: any) => void = () => undefined;
  onClose: (msg: any) => void = () => undefined;
  isDisposed = false;
  sent: any[] = [];
  open(): void {
    /* opened */
  }
  send(data: any): void {
    this.sent.push(data);
  }
  close(): void {
    /* closed */
  }
  receive(data: any): void {
    this.onMsg({ content: { comm_id: 'x', data } });
  }
  of(type: string): any[] {
    return this.sent.filter(m => m.type === type);
  }
}

class FakeKernel {
  comms: FakeComm[] = [];
  isDisposed = false;
  iopubMessage = new Signal<this, any>(this);
  createComm(): FakeComm {
    const c = new FakeComm();
    this.comms.push(c);
    return c;
  }
  get last(): FakeComm {
    return this.comms[this.comms.length - 1];
  }
}

class FakeContext {
  kernelChanged = new Signal<this, any>(this);
  statusChanged = new Signal<this, string>(this);
  session: { kernel: FakeKernel | null };
  constructor(kernel: FakeKernel | null) {
    this.session = { kernel };
  }
}

function entry(seq: number, type: string, sender: string, content: string, extra: Partial<IEntry> = {}): IEntry {
  return { id: seq, seq, type, sender, content, payload: {}, created_at: '2026-12-05T22:00:00', ...extra };
}

function state(status = 'idle'): IStateMessage {
  return {
    type: 'state',
    sessions: [
      { id: 3, agent: 'gpt', kind: 'chat', status, last_entry: null },
      { id: 5, agent: 'writer', kind: 'chat', status: 'idle', last_entry: null }
    ],
    pending: [],
    agents: ['gpt', 'writer', '<img src=x>']
  };
}

function reset(entries: IEntry[], status = 'idle', sessionId = 3, agent = 'gpt'): any {
  return {
    type: 'chat',
    ok: true,
    session_id: sessionId,
    reset: true,
    bundle: { version: 1, session: { id: sessionId, agent, kind: 'chat' }, status, entries }
  };
}

function setup() {
  const kernel = new FakeKernel();
  const client = new ChazClient();
  const panel = new ChazPanel(client);
  Widget.attach(panel, document.body);
  client.follow(new FakeContext(kernel) as any);
  const comm = kernel.last;
  comm.receive(state());
  return { kernel, client, panel, comm };
}

function box(panel: ChazPanel): HTMLTextAreaElement {
  return panel.node.querySelector('.chaz-chat-input') as HTMLTextAreaElement;
}

function press(target: HTMLElement, init: KeyboardEventInit): KeyboardEvent {
  const ev = new KeyboardEvent('keydown', { bubbles: true, cancelable: true, ...init });
  target.dispatchEvent(ev);
  return ev;
}

afterEach(() => {
  document.body.replaceChildren();
});

describe('parseMessage', () => {
  it.each([
    ['@gpt hello', 'gpt', 'hello'],
    ['  @gpt   hello there', 'gpt', 'hello there'],
    ['@gpt\nfirst line\nsecond', 'gpt', 'first line\nsecond'],
    ['@gpt', 'gpt', ''],
    ['@analyst@gpt-4o compare', 'analyst@gpt-4o', 'compare'],
    ['hello @gpt', null, 'hello @gpt'],
    ['@@gpt hi', null, '@@gpt hi'],
    ['@gpt, hi', null, '@gpt, hi'],
    ['@1abc hi', null, '@1abc hi'],
    ['mail me@example.com', null, 'mail me@example.com']
  ])('%j -> @%s %j', (raw, agent, text) => {
    expect(parseMessage(raw)).toEqual({ agent, text });
  });
});

describe('isSendKey', () => {
  it('is Enter alone', () => {
    expect(isSendKey(new KeyboardEvent('keydown', { key: 'Enter' }))).toBe(true);
    expect(isSendKey(new KeyboardEvent('keydown', { key: 'Enter', shiftKey: true }))).toBe(false);
    expect(isSendKey(new KeyboardEvent('keydown', { key: 'Enter', isComposing: true }))).toBe(false);
    expect(isSendKey(new KeyboardEvent('keydown', { key: 'a' }))).toBe(false);
  });
});

describe('visible', () => {
  it('names control, ANSI, bidi and zero-width characters', () => {
    expect(visible('\u001b[31mred\u001b[0m')).toBe('<U+001B>[31mred<U+001B>[0m');
    expect(visible('abc\u202Efed\u200B')).toBe('abc<U+202E>fed<U+200B>');
    expect(visible('tab\tnew\nline\r\n')).toBe('tab\tnew\nline\r\n');
    expect(visible('nul\u0000 del\u007f')).toBe('nul<U+0000> del<U+007F>');
  });
});

describe('chatMessage / sentMessage', () => {
  it('drop what is malformed', () => {
    expect(chatMessage({ type: 'chat', ok: true, session_id: '3', reset: false })).toBeNull();
    expect(chatMessage({ type: 'chat', ok: true, session_id: 3, reset: true, bundle: { entries: 'x' } })).toBeNull();
    expect(chatMessage(reset([]) && { ...reset([]), session_id: 4 })).toBeNull(); // bundle of another session
    expect(chatMessage(null)).toBeNull();
    const delta = chatMessage({ type: 'chat', ok: true, session_id: 3, entries: [{ seq: 'x' }, 5, entry(1, 'Message', 'u', 'ok')] });
    expect(delta?.entries?.map(e => e.content)).toEqual(['ok']);
    expect(sentMessage({ type: 'sent', ok: 'yes' })).toBeNull();
    expect(sentMessage({ type: 'sent', ok: false, request_id: 5, message: 'x'.repeat(5000) })?.message.length).toBe(500);
  });
});

describe('the chat in the sidebar', () => {
  it('opens a session on a click and draws its transcript with the cell renderer', () => {
    const { panel, comm } = setup();
    (panel.node.querySelector('.chaz-session[data-session-id="3"] .chaz-agent') as HTMLElement).click();
    expect(comm.of('chat_open')).toEqual([{ type: 'chat_open', session_id: 3 }]);
    expect(panel.node.classList.contains('chaz-mode-chat')).toBe(true);
    comm.receive(reset([entry(1, 'Message', 'user', 'hi'), entry(2, 'Message', 'gpt', 'hello!')]));
    const chat = panel.node.querySelector('.chaz-chat') as HTMLElement;
    expect(chat.hidden).toBe(false);
    expect(chat.querySelector('.chaz-transcript .chaz-title')?.textContent).toBe('Session 3');
    expect(Array.from(chat.querySelectorAll('.chaz-entries .chaz-content')).map(n => n.textContent)).toEqual([
      'hi',
      'hello!'
    ]);
    expect(chat.querySelector('.chaz-chat-title')?.textContent).toBe('#3 @gpt');
    expect(box(panel).placeholder).toBe('Message @gpt');
  });

  it('sends on Enter, keeps a new line on Shift+Enter, and clears the box once written', () => {
    const { panel, comm } = setup();
    panel.openChat(3);
    comm.receive(reset([]));
    const input = box(panel);
    input.value = 'line one';
    const shifted = press(input, { key: 'Enter', shiftKey: true });
    expect(shifted.defaultPrevented).toBe(false); // the textarea puts the new line in
    expect(comm.of('send')).toEqual([]);
    input.value = 'line one\nline two';
    const enter = press(input, { key: 'Enter' });
    expect(enter.defaultPrevented).toBe(true);
    expect(comm.of('send')).toEqual([
      { type: 'send', request_id: 'send-1', text: 'line one\nline two', session_id: 3 }
    ]);
    press(input, { key: 'Enter' }); // no second send while the first is unanswered
    expect(comm.of('send').length).toBe(1);
    comm.receive({ type: 'sent', request_id: 'send-1', ok: true, session_id: 3, message: 'sent to @gpt (session 3)' });
    expect(input.value).toBe('');
    // the Message and the reply arrive as a delta
    comm.receive({
      type: 'chat', ok: true, session_id: 3, reset: false, status: 'running', stream: null,
      entries: [entry(1, 'Message', 'user', 'line one\nline two')]
    });
    expect(panel.node.querySelector('.chaz-chat .chaz-entries .chaz-content')?.textContent).toBe('line one\nline two');
  });

  it('a queued send (the kernel runs a cell of its own) keeps waiting for its written answer', () => {
    const { panel, comm } = setup();
    panel.openChat(3);
    comm.receive(reset([]));
    const input = box(panel);
    input.value = 'hello';
    press(input, { key: 'Enter' });
    comm.receive({ type: 'sent', request_id: 'send-1', ok: true, queued: true, session_id: null,
                   message: 'the kernel is busy running code; the message is written when it is free' });
    const note = panel.node.querySelector('.chaz-chat-error') as HTMLElement;
    expect(note.textContent).toBe('the kernel is busy running code; the message is written when it is free');
    expect(note.classList.contains('chaz-chat-error-text')).toBe(false);
    expect(input.value).toBe('hello');
    press(input, { key: 'Enter' }); // still one send in flight
    expect(comm.of('send').length).toBe(1);
    comm.receive({ type: 'sent', request_id: 'send-1', ok: true, session_id: 3, message: 'sent to @gpt (session 3)' });
    expect(input.value).toBe('');
    expect(note.textContent).toBe('');
  });

  it('sends @NAME as the agent and keeps the text when the kernel refuses', () => {
    const { panel, comm } = setup();
    panel.openChat(3);
    comm.receive(reset([]));
    const input = box(panel);
    input.value = '@writer draft a poem';
    press(input, { key: 'Enter' });
    expect(comm.of('send')[0]).toEqual({
      type: 'send', request_id: 'send-1', text: 'draft a poem', session_id: 3, agent: 'writer'
    });
    comm.receive({ type: 'sent', request_id: 'send-1', ok: false, session_id: null, message: 'unknown agent @writer' });
    expect(input.value).toBe('@writer draft a poem');
    expect(panel.node.querySelector('.chaz-chat-error')?.textContent).toBe('unknown agent @writer');
    input.value = '@gpt   ';
    press(input, { key: 'Enter' });
    expect(comm.of('send').length).toBe(1);
    expect(panel.node.querySelector('.chaz-chat-error')?.textContent).toBe('Write the message after @gpt.');
    // the kernel moves the chat to the session the Message went to
    comm.receive(reset([entry(1, 'Message', 'user', 'x')], 'running', 5, 'writer'));
    expect(panel.chat.sessionId).toBe(5);
    expect(panel.node.querySelector('.chaz-chat-title')?.textContent).toBe('#5 @writer');
  });

  it('starts a new chat with an agent from the list', () => {
    const { panel, comm } = setup();
    const select = panel.node.querySelector('.chaz-new-agent') as HTMLSelectElement;
    // the kernel's agent list is checked: a name that is not an agent name is left out
    expect(Array.from(select.options).map(o => o.value)).toEqual(['gpt', 'writer']);
    select.value = 'writer';
    (panel.node.querySelector('.chaz-new-chat-button') as HTMLButtonElement).click();
    expect(panel.node.querySelector('.chaz-chat-title')?.textContent).toBe('New chat with @writer');
    const input = box(panel);
    input.value = 'hello';
    press(input, { key: 'Enter' });
    expect(comm.of('send')).toEqual([
      { type: 'send', request_id: 'send-1', text: 'hello', agent: 'writer', new: true }
    ]);
  });

  it('shows every kernel string as text: HTML, ANSI, control and bidi characters', () => {
    const { panel, comm } = setup();
    panel.openChat(3);
    const evil = '<img src=x onerror="window.__pwned=1">\u001b[31mred\u001b[0m \u202Eevil\u0007';
    comm.receive(
      reset([
        entry(1, 'Message', '<b>user</b>', evil),
        entry(2, 'ToolCall', 'gpt', '', { tool_call_id: 'c1', tool_name: '<i>t</i>', payload: { arguments: { q: evil } } }),
        entry(3, 'ToolResult', 'gpt', evil, { tool_call_id: 'c1', payload: { output: evil } })
      ])
    );
    comm.receive({
      type: 'chat', ok: true, session_id: 3, reset: false, entries: [], status: 'running',
      stream: { run_id: 1, sender: 'gpt', text: 'so far \u001b[1m<script>x</script>' }
    });
    const chat = panel.node.querySelector('.chaz-chat') as HTMLElement;
    expect(chat.querySelectorAll('img, b, i, script').length).toBe(0);
    const text = chat.textContent ?? '';
    expect(text).toContain('<img src=x onerror="window.__pwned=1"><U+001B>[31mred<U+001B>[0m <U+202E>evil<U+0007>');
    expect(text).not.toMatch(/[\u0000-\u0008\u001b\u202e]/);
    expect(chat.querySelector('.chaz-partial .chaz-content')?.textContent).toBe('so far <U+001B>[1m<script>x</script>');
    expect((window as any).__pwned).toBeUndefined();
  });

  it('updates only the streamed block while only the stream changes, and keeps opened tool rows', () => {
    const { panel, comm } = setup();
    panel.openChat(3);
    comm.receive(
      reset([
        entry(1, 'ToolCall', 'gpt', '', { tool_call_id: 'c1', tool_name: 'add', payload: { arguments: { a: 1 } } }),
        entry(2, 'ToolResult', 'gpt', '2', { tool_call_id: 'c1', payload: { output: '2' } })
      ], 'running')
    );
    const row = panel.node.querySelector('.chaz-chat details.chaz-tool') as HTMLDetailsElement;
    row.open = true;
    const delta = (extra: any) => comm.receive({ type: 'chat', ok: true, session_id: 3, reset: false, entries: [], status: 'running', ...extra });
    delta({ stream: { run_id: 1, sender: 'gpt', text: 'The' } });
    expect(panel.node.querySelector('.chaz-chat details.chaz-tool')).toBe(row); // not redrawn
    delta({ stream: { run_id: 1, sender: 'gpt', text: 'The answer' } });
    expect(panel.node.querySelectorAll('.chaz-chat .chaz-partial').length).toBe(1);
    expect(panel.node.querySelector('.chaz-chat .chaz-partial .chaz-content')?.textContent).toBe('The answer');
    delta({ status: 'idle', stream: null, entries: [entry(3, 'Message', 'gpt', 'The answer is 2')] });
    expect(panel.node.querySelector('.chaz-chat .chaz-partial')).toBeNull();
    expect((panel.node.querySelector('.chaz-chat details.chaz-tool') as HTMLDetailsElement).open).toBe(true);
    expect(panel.node.querySelector('.chaz-chat .chaz-status')?.textContent).toBe('idle');
  });

  it('puts the open session\'s approval cards and Stop inline', () => {
    const { panel, comm } = setup();
    const parked = state('parked');
    parked.pending = [
      { request_id: 'r1', session_id: 3, agent: 'gpt', tool_name: 'drop_rows', risk_level: 'high',
        arguments_display: { table: 't' }, created_at: '2026-12-05T22:00:01' },
      { request_id: 'r2', session_id: 5, agent: 'writer', tool_name: 'send_mail', risk_level: 'low',
        arguments_display: {}, created_at: '2026-12-05T22:00:02' }
    ];
    comm.receive(parked);
    panel.openChat(3);
    comm.receive(reset([], 'parked'));
    const inline = panel.node.querySelectorAll('.chaz-chat-approvals .chaz-card');
    expect(Array.from(inline).map(c => (c as HTMLElement).dataset.requestId)).toEqual(['r1']);
    (inline[0].querySelector('.chaz-approve') as HTMLButtonElement).click();
    expect(comm.of('decide')).toEqual([{ type: 'decide', request_id: 'r1', decision: 'approve', reason: null }]);
    const stop = panel.node.querySelector('.chaz-chat-stop') as HTMLButtonElement;
    expect(stop.hidden).toBe(false);
    stop.click();
    expect(comm.of('stop')).toEqual([{ type: 'stop', session_id: 3 }]);
    expect(stop.disabled).toBe(true);
    // back to the lists: the card goes back to the pending list, the chat stops following
    (panel.node.querySelector('.chaz-chat-back') as HTMLButtonElement).click();
    expect(comm.of('chat_close').length).toBe(1);
    expect(panel.node.querySelectorAll('.chaz-pending-list .chaz-card').length).toBe(2);
    expect(panel.node.classList.contains('chaz-mode-chat')).toBe(false);
  });

  it('loads earlier pages in place through the kernel, shown as text too', async () => {
    const { panel, comm } = setup();
    panel.openChat(3);
    const first = reset([entry(51, 'Message', 'user', 'newest')]);
    first.bundle = { ...first.bundle, first_seq: 51, earlier: 50, earlier_command: '%chaz log 3 --before 51' };
    comm.receive(first);
    const button = panel.node.querySelector('.chaz-chat .chaz-earlier-button') as HTMLButtonElement;
    expect(panel.node.querySelector('.chaz-chat .chaz-earlier-count')?.textContent).toBe('50 earlier entries');
    button.click();
    const [ask] = comm.of('page');
    expect(ask).toMatchObject({ type: 'page', session_id: 3, before_seq: 51 });
    comm.receive({
      type: 'page', request_id: ask.request_id, ok: true, session_id: 3, first_seq: 50, earlier: 49,
      entries: [entry(50, 'Message', 'gpt', 'older \u202Etext')]
    });
    await new Promise(resolve => setTimeout(resolve, 0));
    const texts = Array.from(panel.node.querySelectorAll('.chaz-chat .chaz-entries .chaz-content')).map(n => n.textContent);
    expect(texts).toEqual(['older <U+202E>text', 'newest']);
    // a later delta keeps the loaded page
    comm.receive({ type: 'chat', ok: true, session_id: 3, reset: false, status: 'idle', stream: null,
      entries: [entry(52, 'Message', 'gpt', 'reply')] });
    expect(panel.node.querySelectorAll('.chaz-chat .chaz-entries .chaz-content').length).toBe(3);
  });

  it('follows the session again after a reconnect', () => {
    const { panel, comm, client } = setup();
    panel.openChat(3);
    comm.onClose({});
    client.connect();
    const next = (client as any)._comm as FakeComm;
    next.receive(state());
    expect(next.of('chat_open')).toEqual([{ type: 'chat_open', session_id: 3 }]);
  });
});

describe('sidebar notices and the notebook line', () => {
  it('clear a notice after a while or at the next click', () => {
    jest.useFakeTimers();
    try {
      const { panel, comm } = setup();
      comm.receive(state('running'));
      (panel.node.querySelector('.chaz-session[data-session-id="3"] .chaz-stop') as HTMLButtonElement).click();
      comm.receive({ type: 'stopped', session_id: 3, ok: true, message: 'session 3 has no run to stop' });
      const notice = panel.node.querySelector('.chaz-panel-notice') as HTMLElement;
      expect(notice.textContent).toBe('session 3 has no run to stop');
      jest.advanceTimersByTime(NOTICE_MS + 10);
      expect(notice.textContent).toBe('');
      comm.receive({ type: 'decided', request_id: 'x', ok: true, message: 'drop_rows: approve by user' });
      expect(notice.textContent).toBe('drop_rows: approve by user');
      (panel.node.querySelector('.chaz-refresh') as HTMLButtonElement).click();
      expect(notice.textContent).toBe('');
    } finally {
      jest.useRealTimers();
    }
  });

  it('follow a rename of the notebook', () => {
    const client = new ChazClient();
    const panel = new ChazPanel(client);
    const source = { path: 'Untitled.ipynb', pathChanged: new Signal<any, string>({}) };
    panel.followPath(source);
    const line = panel.node.querySelector('.chaz-panel-target') as HTMLElement;
    expect(line.textContent).toBe('Notebook: Untitled.ipynb');
    source.path = 'analysis.ipynb';
    source.pathChanged.emit('analysis.ipynb');
    expect(line.textContent).toBe('Notebook: analysis.ipynb');
    panel.followPath(null);
    source.pathChanged.emit('other.ipynb');
    expect(line.textContent).toBe('');
  });
});
