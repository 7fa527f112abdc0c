/**
 * The text fields the sidebar draws keep their keys from the notebook's shortcuts (issue 42 §1):
 * each is marked `data-lm-suppress-shortcuts` (Lumino's key matching skips it, in the capture
 * and the bubbling phase) and its keydown never reaches a listener on the document.
 */
import { Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { ChazClient } from '../src/client';
import { ownKeys } from '../src/keys';
import { ChazPanel } from '../src/sidebar';

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
}

class FakeContext {
  kernelChanged = new Signal<this, any>(this);
  statusChanged = new Signal<this, string>(this);
  constructor(public session: { kernel: FakeKernel | null }) {}
}

const KEYS: KeyboardEventInit[] = [
  { key: 'Enter' },
  { key: 'Enter', shiftKey: true },
  { key: 'Enter', ctrlKey: true },
  { key: 'Escape' },
  { key: 'ArrowUp' },
  { key: 'c', ctrlKey: true },
  { key: 'v', ctrlKey: true },
  { key: 'x' }
];

/** The keys of `field` that reached a keydown listener on the document (either phase). */
function leaked(field: HTMLElement): string[] {
  const seen: string[] = [];
  const hear = (ev: KeyboardEvent) => {
    if (ev.target === field) {
      seen.push(`${ev.eventPhase === Event.CAPTURING_PHASE ? 'capture' : 'bubble'} ${ev.key}`);
    }
  };
  document.addEventListener('keydown', hear);
  try {
    for (const init of KEYS) {
      field.dispatchEvent(new KeyboardEvent('keydown', { bubbles: true, cancelable: true, ...init }));
    }
  } finally {
    document.removeEventListener('keydown', hear);
  }
  return seen;
}

afterEach(() => {
  document.body.replaceChildren();
});

describe('ownKeys', () => {
  it('marks the field and keeps its keydowns from the document', () => {
    const field = ownKeys(document.createElement('textarea'));
    document.body.appendChild(field);
    expect(field.getAttribute('data-lm-suppress-shortcuts')).toBe('true');
    expect(leaked(field)).toEqual([]);
  });

  it('is needed: an unmarked field leaks every key to the document', () => {
    const field = document.createElement('textarea');
    document.body.appendChild(field);
    expect(leaked(field)).toHaveLength(KEYS.length);
  });
});

describe('the sidebar keeps the keys of its fields', () => {
  it('in the chat box, the Edit box and the Deny reason', () => {
    const kernel = new FakeKernel();
    const client = new ChazClient();
    const panel = new ChazPanel(client);
    Widget.attach(panel, document.body);
    client.follow(new FakeContext({ kernel }) as any);
    kernel.comms[kernel.comms.length - 1].receive({
      type: 'state',
      sessions: [{ id: 3, agent: 'ops', kind: 'chat', status: 'parked', last_entry: null }],
      pending: [
        {
          request_id: 'r1',
          session_id: 3,
          agent: 'ops',
          tool_name: 'wipe',
          risk_level: 'high',
          arguments_display: { path: '/tmp/x' },
          created_at: '2026-12-02T15:00:01'
        }
      ],
      agents: ['ops']
    });
    const fields = ['.chaz-chat-input', '.chaz-edit-box', '.chaz-reason'].map(
      sel => panel.node.querySelector(sel) as HTMLElement
    );
    for (const field of fields) {
      expect(field).not.toBeNull();
      expect(field.getAttribute('data-lm-suppress-shortcuts')).toBe('true');
      expect(leaked(field)).toEqual([]);
    }
    // every text field the sidebar draws is one of them
    expect(panel.node.querySelectorAll('textarea, input:not([type=checkbox])').length).toBe(
      panel.node.querySelectorAll('[data-lm-suppress-shortcuts]').length
    );
  });
});
