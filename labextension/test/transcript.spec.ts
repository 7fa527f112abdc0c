/**
 * Unit tests of the transcript renderer (pure DOM, jsdom).
 */
import {
  answersTogether,
  countLabel,
  endedAcks,
  toolTiming,
  argsPreview,
  describeDecision,
  foldEntries,
  formatDuration,
  renderTranscript
} from '../src/transcript';
import { codeRows, setCellInserter } from '../src/code';
import { IEntry, ISessionBundle } from '../src/types';

let nextId = 1;
function entry(type: string, extra: Partial<IEntry> = {}): IEntry {
  const id = nextId++;
  return {
    id,
    seq: id,
    type,
    sender: 'user',
    content: '',
    tool_call_id: null,
    tool_name: null,
    payload: {},
    created_at: '2026-12-02T15:00:00.123456',
    ...extra
  };
}

function bundle(entries: IEntry[], status = 'idle'): ISessionBundle {
  return {
    version: 1,
    session: { id: 3, agent: 'assistant', kind: 'chat', parent_id: null, depth: 0 },
    status,
    entries
  };
}

function texts(root: Element, selector: string): string[] {
  return Array.from(root.querySelectorAll(selector)).map(n => n.textContent ?? '');
}

beforeEach(() => {
  nextId = 1;
});

describe('a fork', () => {
  it('says in its header where it was forked from', () => {
    const value = bundle([entry('Message', { content: 'hi' })]);
    value.session = { ...value.session, forked_from: 1, forked_at_seq: 12 };
    const root = renderTranscript(value);
    expect(texts(root, '.chaz-header .chaz-forked')).toEqual(['forked from session 1 at #12']);
    expect(texts(renderTranscript(bundle([])), '.chaz-forked')).toEqual([]);
  });
});

describe('streamed reply', () => {
  it('shows the text so far under the entries, as text', () => {
    const evil = '<script>window.__pwned = 1</script>';
    const value = {
      ...bundle([entry('Message', { content: 'hi' })], 'running'),
      stream: { run_id: 2, sender: 'assistant', text: 'so far ' + evil }
    };
    const root = renderTranscript(value);
    const partial = root.querySelector('.chaz-entries > .chaz-partial');
    expect(partial?.querySelector('.chaz-content')?.textContent).toBe('so far ' + evil);
    expect(partial?.querySelector('.chaz-sender')?.textContent).toBe('assistant');
    expect(root.querySelector('script')).toBeNull();
    expect((window as any).__pwned).toBeUndefined();
  });

  it('is gone once the bundle has no stream (the Message replaced it)', () => {
    const root = renderTranscript(
      bundle([entry('Message', { content: 'hi' }), entry('Message', { sender: 'assistant', content: 'whole' })])
    );
    expect(root.querySelector('.chaz-partial')).toBeNull();
    expect(texts(root, '.chaz-content')).toEqual(['hi', 'whole']);
  });
});

describe('renderTranscript', () => {
  it('draws header, type badges, senders and contents', () => {
    const root = renderTranscript(
      bundle(
        [
          entry('Message', { content: 'What is 2+3?' }),
          entry('Ack', { sender: 'system', content: 'run started' }),
          entry('Message', { sender: 'assistant', content: 'It is 5.' })
        ],
        'running'
      )
    );
    expect(root.querySelector('.chaz-title')?.textContent).toBe('Session 3');
    expect(root.querySelector('.chaz-header .chaz-agent')?.textContent).toBe('assistant');
    expect(root.querySelector('.chaz-status')?.textContent).toBe('running');
    expect(root.querySelector('.chaz-count')?.textContent).toBe('3 entries');
    expect(texts(root, '.chaz-entries > .chaz-entry .chaz-badge')).toEqual([
      'Message',
      'Ack',
      'Message'
    ]);
    expect(texts(root, '.chaz-entries .chaz-sender')).toEqual(['user', 'system', 'assistant']);
    expect(texts(root, '.chaz-content')).toEqual(['What is 2+3?', 'run started', 'It is 5.']);
    const agentRows = root.querySelectorAll('.chaz-from-agent');
    expect(agentRows.length).toBe(1);
    expect(agentRows[0].textContent).toContain('It is 5.');
    expect(root.querySelector('.chaz-time')?.textContent).toBe('15:00:00');
  });

  it('never interprets agent text as HTML', () => {
    const evil = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2">';
    const root = renderTranscript(
      bundle([
        entry('Message', { sender: '<b>mallory</b>', content: evil }),
        entry('ToolCall', {
          tool_call_id: 'c1',
          tool_name: '<i>tool</i>',
          payload: { arguments: { html: evil } }
        }),
        entry('ToolResult', { tool_call_id: 'c1', payload: { output: evil, is_error: false } }),
        entry('Error', { content: evil })
      ])
    );
    document.body.appendChild(root);
    expect(root.querySelectorAll('script').length).toBe(0);
    expect(root.querySelectorAll('img').length).toBe(0);
    expect(root.querySelectorAll('b').length).toBe(0);
    expect(root.querySelectorAll('i').length).toBe(0);
    expect((window as any).__pwned).toBeUndefined();
    // the text is shown literally
    expect(root.querySelector('.chaz-type-message .chaz-content')?.textContent).toBe(evil);
    expect(root.querySelector('.chaz-type-message .chaz-sender')?.textContent).toBe('<b>mallory</b>');
    expect(root.querySelector('.chaz-tool-output')?.textContent).toBe(evil);
    expect(root.querySelector('.chaz-tool-name')?.textContent).toBe('<i>tool</i>');
    expect(root.innerHTML).toContain('&lt;script&gt;');
    root.remove();
  });

  it('shows control, bidi and zero-width characters as text, on every authored string', () => {
    const rlo = '\u202Eand be quick';
    const root = renderTranscript(
      bundle([
        entry('Message', { sender: 'mal\u2066lory\u2069', content: rlo }),
        entry('ToolCall', {
          tool_call_id: 'c1',
          sender: 'other\u200B',
          tool_name: 'to\u202Eol',
          payload: { arguments: { path: '/srv/\u202Etxt.sgol' } }
        }),
        entry('ToolResult', { tool_call_id: 'c1', payload: { output: '\u001b[31mred\u001b[0m \u202Eok' } }),
        entry('ApprovalRequest', {
          tool_call_id: 'c9',
          sender: 'assistant',
          payload: { request_id: 'r9', agent: 'ag\u202Ee', tool_name: 'sh\u2067', arguments_display: { cmd: 'x\u202E' } }
        }),
        entry('ApprovalDecision', {
          payload: { request_id: 'r9', decision: 'deny', decided_by: 'p\u202E', reason: 'no\u202E' }
        }),
        entry('Error', { content: 'bad \u0007\u202E' })
      ])
    );
    const text = (sel: string): string | null | undefined => root.querySelector(sel)?.textContent;
    expect(text('.chaz-type-message .chaz-content')).toBe('<U+202E>and be quick');
    expect(text('.chaz-type-message .chaz-sender')).toBe('mal<U+2066>lory<U+2069>');
    expect(text('.chaz-tool .chaz-tool-name')).toBe('to<U+202E>ol');
    expect(text('.chaz-tool-args')).toBe('(path="/srv/<U+202E>txt.sgol")');
    expect(text('.chaz-tool-output')).toBe('<U+001B>[31mred<U+001B>[0m <U+202E>ok');
    expect(text('.chaz-tool-out')).toContain('<U+001B>[31mred');
    expect(text('.chaz-tool-by')).toBe('called by other<U+200B>');
    expect(text('.chaz-approval .chaz-sender')).toBe('ag<U+202E>e');
    expect(text('.chaz-approval .chaz-tool-name')).toBe('sh<U+2067>');
    expect(text('.chaz-approval-args')).toContain('x<U+202E>');
    expect(text('.chaz-approval-outcome')).toBe('denied by p<U+202E>: no<U+202E>');
    expect(text('.chaz-type-error .chaz-content')).toBe('bad <U+0007><U+202E>');
    // not one character that reorders or hides text is left in the cell
    expect(root.textContent).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u200b-\u200f\u202a-\u202e\u2066-\u2069]/);
  });

  it('folds a ToolCall and its ToolResult into one collapsible row', () => {
    const root = renderTranscript(
      bundle([
        entry('Message', { content: 'add 2 and 3' }),
        entry('ToolCall', {
          sender: 'assistant',
          tool_call_id: 'call_1',
          tool_name: 'add',
          payload: { arguments: { a: 2, b: 3 }, run_id: 1 }
        }),
        entry('ToolResult', {
          sender: 'assistant',
          tool_call_id: 'call_1',
          tool_name: 'add',
          content: '5',
          payload: { output: '5', is_error: false, duration_ms: 3.4 }
        }),
        entry('Message', { sender: 'assistant', content: '5' })
      ])
    );
    const tools = root.querySelectorAll('details.chaz-tool');
    expect(tools.length).toBe(1);
    const tool = tools[0] as HTMLDetailsElement;
    expect(tool.open).toBe(false);
    expect(tool.querySelector('summary')?.textContent).toBe('#2Tooladd(a=2, b=3)ok · 3.4 ms→ 5');
    expect(tool.querySelector('.chaz-tool-arguments')?.textContent).toBe('{\n  "a": 2,\n  "b": 3\n}');
    expect(tool.querySelector('.chaz-tool-output')?.textContent).toBe('5');
    expect(tool.classList.contains('chaz-tool-error')).toBe(false);
    // order kept: message, tool row, message
    expect(
      Array.from(root.querySelectorAll('.chaz-entries > *')).map(n => (n as HTMLElement).dataset.type)
    ).toEqual(['Message', 'ToolCall', 'Message']);
  });

  it('styles failed tool results as errors and keeps unmatched halves', () => {
    const root = renderTranscript(
      bundle([
        entry('ToolCall', { tool_call_id: 'a', tool_name: 'div', payload: { arguments: { x: 1, y: 0 } } }),
        entry('ToolCall', { tool_call_id: 'b', tool_name: 'slow', payload: { arguments: {} } }),
        entry('ToolResult', {
          tool_call_id: 'a',
          tool_name: 'div',
          payload: { output: 'ZeroDivisionError: division by zero', is_error: true, duration_ms: 1500 }
        }),
        entry('ToolResult', { tool_call_id: 'zzz', tool_name: 'orphan', payload: { output: 'late' } })
      ])
    );
    const tools = Array.from(root.querySelectorAll('details.chaz-tool'));
    expect(tools.length).toBe(3);
    expect(tools[0].classList.contains('chaz-tool-error')).toBe(true);
    expect(tools[0].querySelector('.chaz-tool-state')?.textContent).toBe('error · 1.5 s');
    expect(tools[0].querySelector('.chaz-label:last-of-type')?.textContent).toBe('error');
    expect(tools[1].classList.contains('chaz-tool-pending')).toBe(true);
    expect(tools[1].querySelector('.chaz-tool-state')?.textContent).toBe('no result yet');
    expect(tools[2].querySelector('.chaz-tool-name')?.textContent).toBe('orphan');
    expect(tools[2].querySelector('.chaz-tool-output')?.textContent).toBe('late');
  });

  it('shows an approval request with its decision', () => {
    const root = renderTranscript(
      bundle([
        entry('ApprovalRequest', {
          sender: 'assistant',
          tool_name: 'delete_file',
          payload: {
            request_id: 'r1',
            tool_name: 'delete_file',
            risk_level: 'high',
            arguments_display: { path: '/tmp/x', token: '***' },
            timeout_secs: 300,
            agent: 'assistant'
          }
        }),
        entry('ApprovalDecision', {
          payload: { request_id: 'r1', decision: 'deny', reason: 'not today', decided_by: 'user' }
        }),
        entry('ApprovalRequest', {
          payload: { request_id: 'r2', tool_name: 'send_mail', risk_level: 'medium', arguments_display: {} }
        })
      ])
    );
    const approvals = Array.from(root.querySelectorAll('.chaz-approval'));
    expect(approvals.length).toBe(2);
    expect(approvals[0].querySelector('.chaz-tool-name')?.textContent).toBe('delete_file');
    expect(approvals[0].querySelector('.chaz-risk')?.textContent).toBe('high risk');
    expect(approvals[0].querySelector('.chaz-approval-args')?.textContent).toContain('"token": "***"');
    expect(approvals[0].querySelector('.chaz-approval-outcome')?.textContent).toBe('denied by user: not today');
    expect(approvals[0].classList.contains('chaz-approval-deny')).toBe(true);
    expect(approvals[1].querySelector('.chaz-approval-outcome')?.textContent).toBe('pending');
  });

  it('draws errors in red and summaries as a boundary', () => {
    const root = renderTranscript(
      bundle([
        entry('Summary', { sender: 'system', content: 'Earlier: the user asked for sums.' }),
        entry('Error', { sender: 'system', content: 'model call failed: timeout' })
      ])
    );
    const summary = root.querySelector('.chaz-summary');
    expect(summary?.querySelector('.chaz-summary-label')?.textContent).toContain('Summary');
    expect(summary?.querySelector('.chaz-content')?.textContent).toBe('Earlier: the user asked for sums.');
    const err = root.querySelector('.chaz-type-error');
    expect(err?.querySelector('.chaz-content')?.textContent).toBe('model call failed: timeout');
  });

  it('accepts a JSON string and rejects non-bundles gracefully', () => {
    const fromString = renderTranscript(JSON.stringify(bundle([entry('Message', { content: 'hi' })])));
    expect(fromString.querySelector('.chaz-content')?.textContent).toBe('hi');
    const bad = renderTranscript({ hello: 'world' });
    expect(bad.classList.contains('chaz-invalid')).toBe(true);
    expect(bad.textContent).toContain('not a session transcript');
    const empty = renderTranscript(bundle([]));
    expect(empty.querySelector('.chaz-empty')?.textContent).toBe('no entries yet');
    expect(empty.querySelector('.chaz-count')?.textContent).toBe('0 entries');
  });
});

describe('gated calls, answers together, footer', () => {
  const call = (id: string, extra: Partial<IEntry> = {}) =>
    entry('ToolCall', { sender: 'ops', tool_call_id: id, tool_name: 'deploy', payload: { arguments: { target: 'prod' } }, ...extra });
  const request = (id: string, rid: string) =>
    entry('ApprovalRequest', {
      sender: 'ops',
      tool_call_id: id,
      tool_name: 'deploy',
      payload: { request_id: rid, tool_name: 'deploy', risk_level: 'high', arguments_display: { target: 'prod' }, agent: 'ops' }
    });

  it('shows a parked call once, with its one card right under it', () => {
    const root = renderTranscript(bundle([entry('Message', { content: 'ship it' }), call('c1'), request('c1', 'r1')], 'parked'));
    const rows = Array.from(root.querySelectorAll('.chaz-entries > *'));
    expect(rows.map(r => r.className.split(' ')[1])).toEqual(['chaz-type-message', 'chaz-tool', 'chaz-approval']);
    expect(rows[1].querySelector('.chaz-tool-approval')?.textContent).toBe('waiting for approval');
    expect(rows[1].querySelector('.chaz-tool-state')).toBeNull();
    expect(root.querySelectorAll('.chaz-approval').length).toBe(1);
  });

  it('says in the tool row who decided, and drops the card once decided', () => {
    const root = renderTranscript(
      bundle([
        call('c1'),
        request('c1', 'r1'),
        entry('ApprovalDecision', { tool_call_id: 'c1', payload: { request_id: 'r1', decision: 'approve', decided_by: 'user' } }),
        entry('ToolResult', { sender: 'ops', tool_call_id: 'c1', tool_name: 'deploy', payload: { output: 'deployed prod' } })
      ])
    );
    expect(root.querySelectorAll('.chaz-entries > *').length).toBe(1);
    expect(root.querySelector('.chaz-tool-approval')?.textContent).toBe('approved by user');
    expect(root.querySelector('.chaz-tool-output')?.textContent).toBe('deployed prod');
  });

  it('joins a decision and the result of a call shown in an earlier cell into one row', () => {
    const root = renderTranscript(
      bundle([
        entry('ApprovalDecision', { tool_call_id: 'c1', payload: { request_id: 'r1', decision: 'approve', decided_by: 'user' } }),
        entry('ToolResult', { sender: 'ops', tool_call_id: 'c1', tool_name: 'deploy', payload: { output: 'deployed prod' } })
      ])
    );
    const rows = root.querySelectorAll('.chaz-entries > *');
    expect(rows.length).toBe(1);
    expect(rows[0].querySelector('.chaz-tool-name')?.textContent).toBe('deploy');
    expect(rows[0].querySelector('.chaz-tool-approval')?.textContent).toBe('approved by user');
  });

  it('matches results to the latest open call when a later run reuses an id', () => {
    const items = foldEntries([
      call('call_1_1'),
      entry('ToolResult', { tool_call_id: 'call_1_1', payload: { output: 'first' } }),
      call('call_1_1'),
      entry('ToolResult', { tool_call_id: 'call_1_1', payload: { output: 'second' } })
    ]);
    expect(items.map(i => (i.kind === 'tool' ? i.result?.payload?.output : null))).toEqual(['first', 'second']);
  });

  it('says at the Ack when a run answers several messages together', () => {
    const ack = entry('Ack', { sender: 'assistant', payload: { answers: [1, 2, 3], answers_count: 3 } });
    const root = renderTranscript(bundle([entry('Message'), entry('Message'), entry('Message'), ack]));
    expect(root.querySelector('.chaz-type-ack .chaz-answers')?.textContent).toBe('↳ answers 3 messages together');
    expect(answersTogether(entry('Ack', { payload: { answers_count: 1 } }))).toBe('');
    expect(answersTogether(entry('Ack'))).toBe('');
  });

  it('keeps the text a stopped run had streamed, at its cancelled Ack, as text', () => {
    const evil = '<img src=x onerror="window.__pwned = 2">';
    const asked = entry('Message');
    const opened = entry('Ack', { sender: 'assistant' });
    const stopped = entry('Ack', {
      sender: 'assistant',
      content: 'assistant was stopped by user',
      payload: { status: 'cancelled', stopped_by: 'user', partial_text: 'half a reply ' + evil }
    });
    const root = renderTranscript(bundle([asked, opened, stopped]));
    const acks = root.querySelectorAll('.chaz-type-ack');
    expect(acks.length).toBe(1); // the run's opening Ack is over: not shown as working
    expect(acks[0].classList.contains('chaz-stopped')).toBe(true);
    expect(acks[0].querySelector('.chaz-partial-kept')?.textContent).toBe('it had written: half a reply ' + evil);
    expect(root.querySelector('img')).toBeNull();
    expect((window as any).__pwned).toBeUndefined();
  });

  it('draws the footer of a turn view', () => {
    const root = renderTranscript({ ...bundle([entry('Message')]), footer: 'full log: %chaz log 3' });
    expect(root.querySelector('.chaz-footer')?.textContent).toBe('full log: %chaz log 3');
    expect(renderTranscript(bundle([])).querySelector('.chaz-footer')).toBeNull();
  });
});

describe('helpers', () => {
  it('folds entries in seq order', () => {
    const items = foldEntries([
      entry('ToolResult', { seq: 3, tool_call_id: 'x' }),
      entry('ToolCall', { seq: 2, tool_call_id: 'x' }),
      entry('Message', { seq: 1 })
    ]);
    expect(items.map(i => i.kind)).toEqual(['entry', 'tool']);
    const tool = items[1] as { kind: 'tool'; call: IEntry; result: IEntry };
    expect(tool.call.seq).toBe(2);
    expect(tool.result.seq).toBe(3);
  });

  it('formats durations, arguments and decisions', () => {
    expect(formatDuration(3.4)).toBe('3.4 ms');
    expect(formatDuration(14.2)).toBe('14 ms');
    expect(formatDuration(1500)).toBe('1.5 s');
    expect(formatDuration(125000)).toBe('2 min 5 s');
    expect(formatDuration(undefined)).toBe('');
    expect(argsPreview({ a: 1, s: 'x' })).toBe('a=1, s="x"');
    expect(argsPreview({ long: 'y'.repeat(200) }, 20)).toHaveLength(20);
    expect(describeDecision(null)).toBe('pending');
    expect(describeDecision(entry('ApprovalDecision', { payload: { decision: 'approve', decided_by: 'user' } }))).toBe(
      'approved by user'
    );
    expect(describeDecision(entry('ApprovalDecision', { payload: { decision: 'timed_out' } }))).toBe('timed out');
  });
});

describe('show earlier', () => {
  function paged(entries: IEntry[], firstSeq: number, earlier: number): ISessionBundle {
    return {
      ...bundle(entries),
      first_seq: firstSeq,
      earlier,
      earlier_command: `%chaz log 3 --before ${firstSeq}`
    };
  }
  const evil = '<img src=x onerror="window.__pwned=3">';
  function messages(from: number, to: number): IEntry[] {
    const out: IEntry[] = [];
    for (let seq = from; seq <= to; seq++) {
      out.push(entry('Message', { id: seq, seq, content: `m${seq} ${evil}` }));
    }
    return out;
  }

  it('says how many entries come before and which command shows them, without a kernel', () => {
    const root = renderTranscript(paged(messages(71, 120), 71, 70));
    const row = root.querySelector('.chaz-earlier');
    expect(row?.querySelector('.chaz-earlier-count')?.textContent).toBe('70 earlier entries');
    expect(row?.querySelector('.chaz-earlier-command')?.textContent).toBe('%chaz log 3 --before 71 (or --all)');
    expect(row?.querySelector('button')).toBeNull();
    expect(renderTranscript(bundle(messages(1, 3))).querySelector('.chaz-earlier')).toBeNull();
  });

  it('loads the previous page in place when clicked, as text', async () => {
    const asked: Array<[number, number]> = [];
    const loadEarlier = async (sessionId: number, beforeSeq: number) => {
      asked.push([sessionId, beforeSeq]);
      const from = Math.max(1, beforeSeq - 50);
      return { entries: messages(from, beforeSeq - 1), first_seq: from, earlier: from - 1 };
    };
    const shown: number[] = [];
    const root = renderTranscript(paged(messages(71, 120), 71, 70), document, {
      loadEarlier,
      onLoaded: b => shown.push(b.entries.length)
    });
    const click = async () => {
      (root.querySelector('.chaz-earlier-button') as HTMLButtonElement).click();
      await new Promise(r => setTimeout(r, 0));
    };
    await click();
    expect(asked).toEqual([[3, 71]]);
    expect(root.querySelectorAll('.chaz-entries > .chaz-entry').length).toBe(100);
    expect(root.querySelector('.chaz-entries .chaz-content')?.textContent).toBe(`m21 ${evil}`);
    expect(root.querySelector('.chaz-earlier-count')?.textContent).toBe('20 earlier entries');
    expect(root.querySelector('.chaz-earlier-command')?.textContent).toBe('%chaz log 3 --before 21 (or --all)');
    await click();
    expect(asked).toEqual([[3, 71], [3, 21]]);
    expect(root.querySelectorAll('.chaz-entries > .chaz-entry').length).toBe(120);
    expect(root.querySelector('.chaz-earlier')).toBeNull();
    expect(shown).toEqual([100, 120]);
    expect(root.querySelector('img')).toBeNull();
    expect((window as any).__pwned).toBeUndefined();
  });

  it('says which command to run when no kernel answers', async () => {
    const root = renderTranscript(paged(messages(71, 120), 71, 70), document, {
      loadEarlier: async () => null
    });
    (root.querySelector('.chaz-earlier-button') as HTMLButtonElement).click();
    await new Promise(r => setTimeout(r, 0));
    expect(root.querySelectorAll('.chaz-entries > .chaz-entry').length).toBe(50);
    expect(root.querySelector('.chaz-earlier-command')?.textContent).toBe('no kernel to ask; run %chaz log 3 --before 71');
  });

  it("stops at a turn view's start (after_seq)", async () => {
    const value = { ...paged(messages(71, 120), 71, 30), after_seq: 40 };
    const loadEarlier = async (_s: number, beforeSeq: number) => ({
      entries: messages(beforeSeq - 50, beforeSeq - 1),
      first_seq: beforeSeq - 50,
      earlier: beforeSeq - 51
    });
    const root = renderTranscript(value, document, { loadEarlier });
    (root.querySelector('.chaz-earlier-button') as HTMLButtonElement).click();
    await new Promise(r => setTimeout(r, 0));
    expect(root.querySelectorAll('.chaz-entries > .chaz-entry').length).toBe(80);
    expect(root.querySelector('.chaz-entries .chaz-content')?.textContent).toBe(`m41 ${evil}`);
    expect(root.querySelector('.chaz-earlier')).toBeNull();
  });

  it('keeps pages loaded already when the output is drawn again', () => {
    const page = { entries: messages(21, 70), first_seq: 21, earlier: 20 };
    const root = renderTranscript(paged(messages(71, 121), 71, 70), document, { loaded: page });
    expect(root.querySelectorAll('.chaz-entries > .chaz-entry').length).toBe(101);
    expect(root.querySelector('.chaz-earlier-count')?.textContent).toBe('20 earlier entries');
  });
});

describe('code calls and attachments', () => {
  afterEach(() => {
    setCellInserter(null);
    document.body.replaceChildren();
  });

  function codeCall(code: string, extra: Partial<IEntry> = {}): IEntry[] {
    return [
      entry('ToolCall', {
        sender: 'analyst',
        tool_name: 'kernel__run',
        tool_call_id: 'k1',
        payload: { arguments: { code } },
        ...extra
      }),
      entry('ToolResult', {
        sender: 'analyst',
        tool_name: 'kernel__run',
        tool_call_id: 'k1',
        payload: { output: 'ok', is_error: false, duration_ms: 3 }
      })
    ];
  }

  it('shows a code call as a numbered code block, hidden characters named', () => {
    const root = renderTranscript(bundle(codeCall('a = 1\nprint("<img src=x>" + "\u202e")')), document);
    const tool = root.querySelector('.chaz-tool') as HTMLElement;
    expect(tool.querySelector('.chaz-tool-arguments')).toBeNull();
    const lines = texts(tool, '.chaz-code-line');
    expect(lines).toEqual(['1a = 1', '2print("<img src=x>" + "<U+202E>")']);
    expect(tool.querySelector('img')).toBeNull();
    expect(tool.textContent).not.toContain('\u202e');
    // two arguments, one of them code: JSON as for any tool
    const other = renderTranscript(bundle([entry('ToolCall', { tool_name: 't', payload: { arguments: { code: 'x', y: 1 } } })]));
    expect(other.querySelector('.chaz-code')).toBeNull();
    expect(other.querySelector('.chaz-tool-arguments')).not.toBeNull();
  });

  it('copies the code as the tool got it', async () => {
    const writeText = jest.fn(() => Promise.resolve());
    Object.assign(navigator, { clipboard: { writeText } });
    const code = 'print("\u202ex")';
    const root = renderTranscript(bundle(codeCall(code)), document);
    const copy = root.querySelector('.chaz-code-copy') as HTMLButtonElement;
    copy.click();
    await Promise.resolve();
    await Promise.resolve();
    expect(writeText).toHaveBeenCalledWith(code);
    expect(copy.textContent).toBe('Copied');
  });

  it('inserts the code as a cell below through the registered inserter, else has no such control', () => {
    expect(renderTranscript(bundle(codeCall('x = 1')), document).querySelector('.chaz-code-insert')).toBeNull();
    const inserted: [string, HTMLElement][] = [];
    setCellInserter((code, anchor) => {
      inserted.push([code, anchor]);
      return true;
    });
    const root = renderTranscript(bundle(codeCall('x = 1\ny = 2')), document);
    const button = root.querySelector('.chaz-code-insert') as HTMLButtonElement;
    button.click();
    expect(inserted.map(i => i[0])).toEqual(['x = 1\ny = 2']);
    expect(root.contains(inserted[0][1])).toBe(true);
    expect(button.textContent).toBe('Inserted below');
  });

  it('shows what the approver edited, and says so in the decision', () => {
    const [call, result] = codeCall('rm()');
    result.seq = 10;
    const request = entry('ApprovalRequest', {
      tool_call_id: 'k1',
      payload: { request_id: 'q1', tool_name: 'kernel__run', arguments_display: { code: 'rm()' } }
    });
    const decision = entry('ApprovalDecision', {
      tool_call_id: 'k1',
      payload: { request_id: 'q1', decision: 'approve', decided_by: 'user', edited: true, arguments: { code: 'ls()' } }
    });
    result.payload = { ...result.payload, edited: true, arguments: { code: 'ls()' } };
    const root = renderTranscript(bundle([call, request, decision, result]), document);
    expect(texts(root, '.chaz-tool-approval')).toEqual(['approved with edited arguments by user']);
    // the code that ran first, the model's under it; the summary previews what ran
    expect(texts(root, '.chaz-label')).toEqual(['ran as edited by the approver', 'proposed by the model', 'output']);
    expect(texts(root, '.chaz-code-line')).toEqual(['1ls()', '1rm()']);
    expect(texts(root, '.chaz-tool-args')).toEqual(['(code="ls()")']);
  });

  it('shows an open code approval as code', () => {
    const request = entry('ApprovalRequest', {
      payload: { request_id: 'q1', tool_name: 'kernel__run', arguments_display: { code: 'x = 1' } }
    });
    const root = renderTranscript(bundle([request]), document);
    expect(texts(root, '.chaz-approval .chaz-code-line')).toEqual(['1x = 1']);
  });

  it('shows a message\'s attachments as chips, as text', () => {
    const msg = entry('Message', {
      content: 'why so many nulls?',
      payload: {
        attachments: [
          { name: 'sales', type: 'DataFrame', shape: [3, 2] },
          { name: '<b>x</b>' },
          { nope: 1 },
          'str'
        ]
      }
    });
    const root = renderTranscript(bundle([msg]), document);
    expect(texts(root, '.chaz-chip')).toEqual(['📎 sales', '📎 <b>x</b>']);
    expect((root.querySelector('.chaz-chip') as HTMLElement).title).toBe('DataFrame [3,2]');
    expect(root.querySelector('.chaz-chips b')).toBeNull();
    expect(renderTranscript(bundle([entry('Message', { content: 'hi' })])).querySelector('.chaz-chips')).toBeNull();
  });
});

describe('rough edges (issue 26 §5)', () => {
  it('names the run and the approval wait of an approved call apart', () => {
    const root = renderTranscript(
      bundle([
        entry('ToolCall', { sender: 'assistant', tool_call_id: 'c1', tool_name: 'drop_rows', payload: { arguments: {} } }),
        entry('ToolResult', {
          sender: 'assistant',
          tool_call_id: 'c1',
          payload: { output: 'done', duration_ms: 9806.9, approval_wait_ms: 9800, approval: 'approved' }
        })
      ])
    );
    expect(root.querySelector('.chaz-tool-state')?.textContent).toBe(
      'ok · ran 6.9 ms after 9.8 s waiting for approval'
    );
    expect(toolTiming({ duration_ms: 14 })).toBe('14 ms');
    expect(toolTiming({})).toBe('');
  });

  it('does not end a tool row with the agent name; another agent is named as the caller', () => {
    const rows = (sender: string) =>
      renderTranscript(
        bundle([
          entry('ToolCall', { sender, tool_call_id: 'c1', tool_name: 'add', payload: { arguments: { a: 1 } } }),
          entry('ToolResult', { sender, tool_call_id: 'c1', payload: { output: '2', duration_ms: 14 } })
        ])
      );
    const own = rows('assistant').querySelector('.chaz-tool-summary');
    expect(own?.querySelector('.chaz-sender')).toBeNull();
    expect(own?.textContent).not.toContain('assistant');
    expect(own?.querySelector('.chaz-tool-out')?.textContent).toBe('→ 2');
    expect(rows('helper').querySelector('.chaz-tool-by')?.textContent).toBe('called by helper');
  });

  it('does not show an ended Ack as working', () => {
    const ask = entry('Message', { content: 'hi' });
    const ack = entry('Ack', { sender: 'assistant', content: 'assistant is working' });
    const reply = entry('Message', { sender: 'assistant', content: 'hello' });
    const done = renderTranscript(bundle([ask, ack, reply], 'idle'));
    expect(done.textContent).not.toContain('is working');
    expect(done.querySelector('.chaz-type-ack')).toBeNull();
    // an idle session whose last Ack has no reply (a lost run): not working either
    expect(renderTranscript(bundle([ask, ack], 'idle')).textContent).not.toContain('is working');
    // a run that goes on: its Ack says so
    const live = renderTranscript(bundle([ask, ack], 'running'));
    expect(live.querySelector('.chaz-type-ack .chaz-content')?.textContent).toBe('assistant is working');
    expect(endedAcks([ask, ack, reply], 'running').has(ack)).toBe(true);
  });

  it('says what the count counts', () => {
    const entries = [entry('Message'), entry('Message'), entry('Message')];
    const cell = renderTranscript({ ...bundle(entries), scope: 'cell' } as ISessionBundle);
    expect(cell.querySelector('.chaz-count')?.textContent).toBe('3 entries in this cell');
    expect(renderTranscript(bundle(entries)).querySelector('.chaz-count')?.textContent).toBe('3 entries');
    expect(countLabel(1, true)).toBe('1 entry in this cell');
  });
});

describe('entry seq', () => {
  it('starts each row head and each tool row summary with #N, as the kernel views do', () => {
    const out = renderTranscript(
      bundle([
        entry('Message', { seq: 7, content: 'hi' }),
        entry('ToolCall', { seq: 8, sender: 'assistant', tool_call_id: 'c1', tool_name: 'f', payload: { arguments: {} } }),
        entry('ToolResult', { seq: 9, sender: 'assistant', tool_call_id: 'c1', tool_name: 'f', payload: { output: 'ok' } }),
        entry('Summary', { seq: 10, content: 'so far' })
      ])
    );
    const head = out.querySelector('.chaz-type-message .chaz-entry-head') as HTMLElement;
    expect(head.firstElementChild?.className).toBe('chaz-seq');
    expect(head.firstElementChild?.textContent).toBe('#7');
    expect((head.firstElementChild as HTMLElement).title).toBe(
      'entry #7 of the session: %chaz fork SESSION --at 7 branches from here'
    );
    const summary = out.querySelector('.chaz-tool-summary') as HTMLElement;
    expect(summary.firstElementChild?.textContent).toBe('#8');
    expect(out.querySelector('.chaz-summary-line .chaz-seq')?.textContent).toBe('#10');
  });

  it('draws only whole numbers: a forged seq shows nothing', () => {
    const forged = [
      entry('Message', { seq: '<img src=x onerror=alert(1)>' as unknown as number, content: 'a' }),
      entry('Message', { seq: 1.5, content: 'b' }),
      entry('Message', { seq: -1, content: 'c' })
    ];
    const out = renderTranscript(bundle(forged));
    expect(out.querySelectorAll('.chaz-seq').length).toBe(0);
    expect(out.querySelector('img')).toBeNull();
  });
});

describe('long lines of code', () => {
  it('marks a long run of blanks and puts a long line on rows numbered ↪, as the kernel cards do', () => {
    const code = 'x = 1' + ' '.repeat(3000) + ';run()\n' + 'y'.repeat(200);
    const rows = codeRows(code);
    expect(rows).toEqual([
      ['1', 'x = 1⟨3,000 blanks⟩;run()'],
      ['2', 'y'.repeat(160)],
      ['↪', 'y'.repeat(40)]
    ]);
    expect(codeRows(' '.repeat(100) + 'go()')).toEqual([['1', '⟨100 blanks⟩go()']]);
  });
});
