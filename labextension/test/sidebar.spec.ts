/**
 * Sidebar + comm client against a fake kernel (jsdom, no JupyterLab server).
 */
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { ChazClient } from '../src/client';
import { ChazPanel, oldestPending } from '../src/sidebar';
import { IPendingApproval, IStateMessage } from '../src/types';

class FakeComm {
  constructor(public target: string) {}
  onMsg: (msg: any) => void = () => undefined;
  onClose: (msg: any) => void = () => undefined;
  opened = false;
  closed = false;
  isDisposed = false;
  sent: any[] = [];
  open(): void {
    this.opened = true;
  }
  send(data: any): void {
    this.sent.push(data);
  }
  close(): void {
    this.closed = true;
  }
  /** Kernel -> frontend. */
  receive(data: any): void {
    this.onMsg({ content: { comm_id: 'x', data } });
  }
}

class FakeKernel {
  comms: FakeComm[] = [];
  isDisposed = false;
  iopubMessage = new Signal<this, any>(this);
  /** The kernel reports idle after handling a message of this type. */
  idleAfter(parentType: string): void {
    this.iopubMessage.emit({
      header: { msg_type: 'status' },
      parent_header: { msg_type: parentType },
      content: { execution_state: 'idle' }
    });
  }
  createComm(target: string): FakeComm {
    const c = new FakeComm(target);
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

const pending: IPendingApproval[] = [
  {
    request_id: 'r2',
    session_id: 4,
    agent: 'writer',
    tool_name: 'send_mail',
    risk_level: 'medium',
    arguments_display: { to: 'x@y.z', body: '<script>alert(1)</script>' },
    created_at: '2026-12-02T15:00:05'
  },
  {
    request_id: 'r1',
    session_id: 3,
    agent: 'assistant',
    tool_name: 'delete_file',
    risk_level: 'high',
    arguments_display: { path: '/tmp/x' },
    created_at: '2026-12-02T15:00:01'
  }
];

function state(p: IPendingApproval[] = pending): IStateMessage {
  return {
    type: 'state',
    sessions: [
      {
        id: 3,
        agent: 'assistant',
        kind: 'chat',
        status: 'parked',
        last_entry: {
          type: 'ApprovalRequest',
          sender: 'assistant',
          content: 'delete_file needs approval',
          created_at: '2026-12-02T15:00:01'
        }
      },
      { id: 4, agent: 'writer', kind: 'child', status: 'idle', last_entry: null }
    ],
    pending: p
  };
}

function setup() {
  const kernel = new FakeKernel();
  const context = new FakeContext(kernel);
  const client = new ChazClient();
  const panel = new ChazPanel(client);
  Widget.attach(panel, document.body);
  client.follow(context as any);
  return { kernel, context, client, panel };
}

afterEach(() => {
  document.body.replaceChildren();
});

describe('ChazPanel', () => {
  it('says when there is no notebook or no kernel', () => {
    const client = new ChazClient();
    const panel = new ChazPanel(client);
    expect(panel.node.querySelector('.chaz-panel-status')?.textContent).toContain('No notebook');
    client.follow(new FakeContext(null) as any);
    expect(panel.node.querySelector('.chaz-panel-status')?.textContent).toBe('This notebook has no kernel.');
  });

  it('opens the chaz comm and renders sessions and pending approvals', () => {
    const { kernel, panel, client } = setup();
    expect(kernel.comms.length).toBe(1);
    expect(kernel.last.target).toBe('chaz');
    expect(kernel.last.opened).toBe(true);
    expect(client.status).toBe('connecting');

    kernel.last.receive(state());
    expect(client.status).toBe('connected');
    const sessions = Array.from(panel.node.querySelectorAll('.chaz-session'));
    expect(sessions.map(s => s.querySelector('.chaz-agent')?.textContent)).toEqual(['assistant', 'writer']);
    expect(sessions[0].querySelector('.chaz-status')?.textContent).toBe('parked');
    expect(sessions[0].querySelector('.chaz-session-text')?.textContent).toBe('delete_file needs approval');
    const cards = Array.from(panel.node.querySelectorAll('.chaz-card'));
    expect(cards.map(c => c.querySelector('.chaz-tool-name')?.textContent)).toEqual(['send_mail', 'delete_file']);
    expect(panel.node.querySelectorAll('script').length).toBe(0);
    expect(cards[0].querySelector('.chaz-card-args')?.textContent).toContain('<script>alert(1)</script>');
    expect(panel.node.querySelector('.chaz-panel-section')?.textContent).toBe('Pending approvals (2)');
  });

  it('shows the reply a session is writing, as text, until the state drops it', () => {
    const { kernel, panel } = setup();
    const streaming = state();
    streaming.sessions[1] = { ...streaming.sessions[1], status: 'running', streaming: 'so far <script>x</script>' };
    kernel.last.receive(streaming);
    const writer = panel.node.querySelectorAll('.chaz-session')[1];
    expect(writer.querySelector('.chaz-session-streaming .chaz-session-text')?.textContent).toBe(
      'so far <script>x</script>'
    );
    expect(panel.node.querySelectorAll('script').length).toBe(0);
    kernel.last.receive(state());
    expect(panel.node.querySelector('.chaz-session-streaming')).toBeNull();
  });

  it('sends approve and deny (with reason) decisions, keeping a typed reason across updates', () => {
    const { kernel, panel } = setup();
    const comm = kernel.last;
    comm.receive(state());
    const card = panel.node.querySelector('.chaz-card[data-request-id="r2"]') as HTMLElement;
    const input = card.querySelector('.chaz-reason') as HTMLInputElement;
    input.value = 'wrong recipient';
    input.dispatchEvent(new Event('input'));
    // a fresh state must not wipe the reason being typed
    comm.receive(state());
    const again = panel.node.querySelector('.chaz-card[data-request-id="r2"]') as HTMLElement;
    expect(again).toBe(card);
    expect((again.querySelector('.chaz-reason') as HTMLInputElement).value).toBe('wrong recipient');

    (card.querySelector('.chaz-deny') as HTMLButtonElement).click();
    expect(comm.sent).toEqual([
      { type: 'decide', request_id: 'r2', decision: 'deny', reason: 'wrong recipient' }
    ]);
    expect((card.querySelector('.chaz-approve') as HTMLButtonElement).disabled).toBe(true);

    const other = panel.node.querySelector('.chaz-card[data-request-id="r1"]') as HTMLElement;
    (other.querySelector('.chaz-approve') as HTMLButtonElement).click();
    expect(comm.sent[1]).toEqual({ type: 'decide', request_id: 'r1', decision: 'approve', reason: null });

    comm.receive({ type: 'decided', request_id: 'r1', ok: true, message: 'approved delete_file' });
    comm.receive(state([pending[0]]));
    expect(panel.node.querySelectorAll('.chaz-card').length).toBe(1);
    expect(panel.node.querySelector('.chaz-panel-notice')?.textContent).toBe('approved delete_file');
  });

  it('has a Stop button on a session whose run goes on, which sends a stop and waits for the run to end', () => {
    const { kernel, panel } = setup();
    const comm = kernel.last;
    const running = state();
    running.sessions[1] = { ...running.sessions[1], status: 'running' };
    comm.receive(running);
    const stopOf = (id: number) =>
      panel.node.querySelector(`.chaz-session[data-session-id="${id}"] .chaz-stop`) as HTMLButtonElement | null;
    expect(stopOf(3)).not.toBeNull(); // parked on an approval: stoppable too
    expect(stopOf(4)?.textContent).toBe('Stop');

    stopOf(4)!.click();
    expect(comm.sent).toEqual([{ type: 'stop', session_id: 4 }]);
    expect(stopOf(4)!.disabled).toBe(true);
    expect(panel.node.querySelector('.chaz-panel-notice')?.textContent).toBe('Stopping session 4…');
    comm.receive({ type: 'stopped', session_id: 4, ok: true, message: 'stopped session 4 (writer, run 9, was running)' });
    comm.receive(running); // a state while the run unwinds: still one stop request
    expect(stopOf(4)!.disabled).toBe(true);
    expect(panel.node.querySelector('.chaz-panel-notice')?.textContent).toBe(
      'stopped session 4 (writer, run 9, was running)'
    );

    comm.receive(state()); // the run is over: no Stop button
    expect(stopOf(4)).toBeNull();
    comm.receive(running); // a later run of the session may be stopped again
    expect(stopOf(4)!.disabled).toBe(false);
  });

  it('re-enables Stop when the kernel refuses it', () => {
    const { kernel, panel } = setup();
    kernel.last.receive(state());
    const stop = () => panel.node.querySelector('.chaz-session[data-session-id="3"] .chaz-stop') as HTMLButtonElement;
    stop().click();
    expect(stop().disabled).toBe(true);
    kernel.last.receive({ type: 'stopped', session_id: 3, ok: false, message: 'StoreError: no session 3' });
    expect(stop().disabled).toBe(false);
    expect(panel.node.querySelector('.chaz-panel-notice')?.textContent).toBe('StoreError: no session 3');
    expect(panel.node.querySelector('.chaz-panel-notice')?.classList.contains('chaz-notice-error')).toBe(true);
  });

  it('re-enables the buttons when the kernel refuses a decision', () => {
    const { kernel, panel } = setup();
    kernel.last.receive(state());
    const card = panel.node.querySelector('.chaz-card[data-request-id="r1"]') as HTMLElement;
    (card.querySelector('.chaz-approve') as HTMLButtonElement).click();
    kernel.last.receive({ type: 'decided', request_id: 'r1', ok: false, message: 'already decided' });
    expect((card.querySelector('.chaz-approve') as HTMLButtonElement).disabled).toBe(false);
    expect(card.querySelector('.chaz-card-error')?.textContent).toBe('already decided');
    expect(panel.node.querySelector('.chaz-panel-notice')?.classList.contains('chaz-notice-error')).toBe(true);
  });

  it('edits the arguments as JSON and sends them with "Approve edited"; a refusal keeps the edit', () => {
    const { kernel, panel } = setup();
    const comm = kernel.last;
    comm.receive(state());
    const card = panel.node.querySelector('.chaz-card[data-request-id="r1"]') as HTMLElement;
    const box = card.querySelector('.chaz-edit-box') as HTMLTextAreaElement;
    const approveEdited = card.querySelector('.chaz-approve-edited') as HTMLButtonElement;
    expect(box.hidden).toBe(true);
    expect(approveEdited.hidden).toBe(true);
    (card.querySelector('.chaz-edit') as HTMLButtonElement).click();
    expect(box.hidden).toBe(false);
    expect(approveEdited.hidden).toBe(false);
    expect(JSON.parse(box.value)).toEqual({ path: '/tmp/x' });
    box.value = '{"path": 7}';
    box.dispatchEvent(new Event('input'));
    comm.receive(state()); // a fresh state keeps the open box and its text
    expect(panel.node.querySelector('.chaz-card[data-request-id="r1"] .chaz-edit-box')).toBe(box);
    expect(box.value).toBe('{"path": 7}');
    approveEdited.click();
    expect(comm.sent).toEqual([
      { type: 'decide', request_id: 'r1', decision: 'approve', reason: null, arguments: '{"path": 7}' }
    ]);
    expect(approveEdited.disabled).toBe(true);
    const refusal = "edited arguments of delete_file refused: path: 7 is not of type 'string'; the request stays open";
    comm.receive({ type: 'decided', request_id: 'r1', ok: false, message: refusal });
    expect(card.querySelector('.chaz-card-error')?.textContent).toBe(refusal);
    expect(approveEdited.disabled).toBe(false);
    expect(box.hidden).toBe(false);
    expect(box.value).toBe('{"path": 7}');
  });

  it('keeps the focus and the caret in a box being typed in when a new state comes', () => {
    const { kernel, panel } = setup();
    const comm = kernel.last;
    comm.receive(state());
    const card = panel.node.querySelector('.chaz-card[data-request-id="r1"]') as HTMLElement;
    (card.querySelector('.chaz-edit') as HTMLButtonElement).click();
    const box = card.querySelector('.chaz-edit-box') as HTMLTextAreaElement;
    box.value = '{"path": "/tmp/y"}';
    box.dispatchEvent(new Event('input'));
    box.focus();
    box.setSelectionRange(5, 5);
    expect(document.activeElement).toBe(box);
    comm.receive(state()); // e.g. a session's status changed while typing
    comm.receive(state([...pending]));
    expect(document.activeElement).toBe(box);
    expect(box.selectionStart).toBe(5);
    expect(box.value).toBe('{"path": "/tmp/y"}');
    const reason = card.querySelector('.chaz-reason') as HTMLInputElement;
    reason.focus();
    comm.receive(state([pending[0], pending[1], { ...pending[1], request_id: 'r3' }])); // one more
    expect(document.activeElement).toBe(reason);
    comm.receive(state([pending[1], pending[0]])); // another order: still the kernel's
    const order = Array.from(panel.node.querySelectorAll('.chaz-card')).map(c => (c as HTMLElement).dataset.requestId);
    expect(order).toEqual(['r1', 'r2']);
  });

  it('shows a code call as numbered code and edits the code itself', () => {
    const { kernel, panel } = setup();
    const comm = kernel.last;
    const code = 'x = 1\nprint("<b>")';
    comm.receive(
      state([{ ...pending[1], tool_name: 'kernel__run', arguments_display: { code } }])
    );
    const card = panel.node.querySelector('.chaz-card') as HTMLElement;
    expect(card.querySelector('.chaz-card-args')).toBeNull();
    const lines = Array.from(card.querySelectorAll('.chaz-code .chaz-code-line'));
    expect(lines.map(l => l.querySelector('.chaz-code-no')?.textContent)).toEqual(['1', '2']);
    expect(lines[1].textContent).toBe('2print("<b>")');
    expect(card.querySelector('.chaz-code b')).toBeNull(); // text, never HTML
    (card.querySelector('.chaz-edit') as HTMLButtonElement).click();
    const box = card.querySelector('.chaz-edit-box') as HTMLTextAreaElement;
    expect(box.value).toBe(code);
    box.value = 'x = 2';
    box.dispatchEvent(new Event('input'));
    (card.querySelector('.chaz-approve-edited') as HTMLButtonElement).click();
    expect(comm.sent).toEqual([
      { type: 'decide', request_id: 'r1', decision: 'approve', reason: null, arguments: { code: 'x = 2' } }
    ]);
  });

  it('approves the oldest pending request', () => {
    const { kernel, panel } = setup();
    expect(panel.approveOldest()).toBe(false);
    kernel.last.receive(state());
    expect(panel.approveOldest()).toBe(true);
    expect(kernel.last.sent).toEqual([{ type: 'decide', request_id: 'r1', decision: 'approve', reason: null }]);
    expect(oldestPending([])).toBeNull();
  });

  it('reports a kernel without chaz, then reconnects on kernel change', () => {
    const { kernel, context, client, panel } = setup();
    kernel.last.onClose({});
    expect(client.status).toBe('unavailable');
    expect(panel.node.querySelector('.chaz-panel-status')?.textContent).toContain('%load_ext chaz_nb');
    const k2 = new FakeKernel();
    context.session.kernel = k2;
    context.kernelChanged.emit({});
    expect(k2.comms.length).toBe(1);
    k2.last.receive(state([]));
    expect(client.status).toBe('connected');
    expect(panel.node.querySelector('.chaz-pending-list .chaz-empty')?.textContent).toBe('Nothing waits for approval.');
  });

  it('retries after a cell finishes, never after its own comm_open', () => {
    jest.useFakeTimers();
    try {
      const { kernel, client } = setup();
      kernel.last.onClose({}); // target not registered
      expect(client.status).toBe('unavailable');
      // the kernel goes idle after our comm_open: no retry, or it would loop
      kernel.idleAfter('comm_open');
      jest.advanceTimersByTime(10000);
      expect(kernel.comms.length).toBe(1);
      // a cell (e.g. %load_ext chaz_nb) finished: retry, throttled
      kernel.idleAfter('execute_request');
      kernel.idleAfter('execute_request');
      jest.advanceTimersByTime(10000);
      expect(kernel.comms.length).toBe(2);
      kernel.last.receive(state([]));
      expect(client.status).toBe('connected');
      // connected: cells finishing do not reopen the comm
      kernel.idleAfter('execute_request');
      jest.advanceTimersByTime(10000);
      expect(kernel.comms.length).toBe(2);
    } finally {
      jest.useRealTimers();
    }
  });

  it('reconnects after a kernel restart', () => {
    jest.useFakeTimers();
    try {
      const { kernel, context, client } = setup();
      kernel.last.receive(state());
      context.statusChanged.emit('restarting');
      expect(client.status).toBe('connecting');
      context.statusChanged.emit('idle');
      jest.advanceTimersByTime(5000);
      expect(kernel.comms.length).toBe(2);
      kernel.last.receive(state([]));
      expect(client.status).toBe('connected');
    } finally {
      jest.useRealTimers();
    }
  });

  it('closes the old comm when following another notebook', () => {
    const { kernel, client } = setup();
    const first = kernel.last;
    const other = new FakeKernel();
    client.follow(new FakeContext(other) as any);
    expect(first.closed).toBe(true);
    expect(other.comms.length).toBe(1);
    client.follow(null);
    expect(other.last.closed).toBe(true);
    expect(client.status).toBe('no-notebook');
  });
});

describe('ChazClient.page', () => {
  it('asks the kernel for the page before a seq and resolves with its answer', async () => {
    const { kernel, client } = setup();
    kernel.last.receive(state());
    const asked = client.page(3, 71);
    const sent = kernel.last.sent[kernel.last.sent.length - 1];
    expect(sent).toEqual({ type: 'page', request_id: sent.request_id, session_id: 3, before_seq: 71, limit: 50 });
    const entries = [{ id: 70, seq: 70, type: 'Message', sender: 'user', content: 'm70' }];
    kernel.last.receive({ type: 'page', request_id: 'someone-else', ok: true, entries: [], first_seq: 1, earlier: 0 });
    kernel.last.receive({ type: 'page', request_id: sent.request_id, ok: true, session_id: 3, entries, first_seq: 70, earlier: 69 });
    expect(await asked).toEqual({ entries, first_seq: 70, earlier: 69 });
  });

  it('resolves null when not connected, on an error answer, or when the comm goes', async () => {
    const { kernel, client } = setup();
    expect(await client.page(3, 71)).toBeNull(); // no state yet: not connected
    kernel.last.receive(state());
    const refused = client.page(3, 71);
    const id = kernel.last.sent[kernel.last.sent.length - 1].request_id;
    kernel.last.receive({ type: 'page', request_id: id, ok: false, message: 'ValueError: no' });
    expect(await refused).toBeNull();
    const orphan = client.page(3, 71);
    kernel.last.onClose({});
    expect(await orphan).toBeNull();
  });
});

describe('a code call whose code a mask could hide', () => {
  it('says Approve is refused, as the cell card does, and keeps Approve disabled', () => {
    const { kernel, panel } = setup();
    const comm = kernel.last;
    const code = 'api_key = «REDACTED»\nrun(api_key)';
    comm.receive(
      state([
        {
          ...pending[1],
          tool_name: 'kernel__run',
          arguments_display: { code },
          code_check: { problem: 'a masked literal <b>hides</b> code\u202e', masked_literals: 2, sha256: 'ab'.repeat(32) }
        }
      ])
    );
    const card = panel.node.querySelector('.chaz-card') as HTMLElement;
    expect(card.querySelector('.chaz-card-refused')?.textContent).toBe(
      '⛔ Approve is refused: a masked literal <b>hides</b> code<U+202E>'
    );
    expect(card.querySelector('.chaz-card-refused b')).toBeNull();
    expect(Array.from(card.querySelectorAll('.chaz-card-note')).map(n => n.textContent)).toEqual([
      '2 secret literals shown as «REDACTED»: each stands for that one literal, and the code runs with its real value',
      'sha256 abababababababab… (the log keeps it with the code that runs)'
    ]);
    const approve = card.querySelector('.chaz-approve') as HTMLButtonElement;
    expect(approve.disabled).toBe(true);
    // Edit, then Approve edited is the way; a refusal of that re-enables all but Approve
    (card.querySelector('.chaz-edit') as HTMLButtonElement).click();
    (card.querySelector('.chaz-approve-edited') as HTMLButtonElement).click();
    expect(comm.sent).toEqual([
      { type: 'decide', request_id: 'r1', decision: 'approve', reason: null, arguments: { code } }
    ]);
    comm.receive({ type: 'decided', request_id: 'r1', ok: false, message: 'still masked' });
    expect(approve.disabled).toBe(true);
    expect((card.querySelector('.chaz-deny') as HTMLButtonElement).disabled).toBe(false);
  });

  it('keeps "approve oldest pending" from approving it, and says why', () => {
    const { kernel, panel } = setup();
    const comm = kernel.last;
    comm.receive(
      state([
        {
          ...pending[1],
          tool_name: 'kernel__run',
          arguments_display: { code: 'api_key = «REDACTED»' },
          code_check: { problem: 'line 1: a literal you cannot see', masked_literals: 1, sha256: 'ab'.repeat(32) }
        }
      ])
    );
    expect(panel.approveOldest()).toBe(true); // (there is one: the palette says nothing of "none")
    expect(comm.sent).toEqual([]);
    expect(panel.node.querySelector('.chaz-panel-notice')?.textContent).toContain('cannot be approved as shown');
  });

  it('says nothing of the kind for a call the check passed', () => {
    const { kernel, panel } = setup();
    kernel.last.receive(state([{ ...pending[1], tool_name: 'kernel__run', arguments_display: { code: 'x = 1' } }]));
    const card = panel.node.querySelector('.chaz-card') as HTMLElement;
    expect(card.querySelector('.chaz-card-refused')).toBeNull();
    expect((card.querySelector('.chaz-approve') as HTMLButtonElement).disabled).toBe(false);
  });
});
