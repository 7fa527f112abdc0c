/**
 * Stop over the control channel (../src/stop, ../src/stop-plugin) against a fake kernel (jsdom).
 */
import { Signal } from '@lumino/signaling';

import { ChazClient } from '../src/client';
import { CONTROL_TYPES, REPLY_TIMEOUT, StopChannel, stopButtonOf, stopChannel, watchNotebook } from '../src/stop';


/** A kernel connection that records control messages and answers as chaz_nb's handlers do. */
class ControlKernel {
  clientId = 'client-1';
  username = 'user';
  isDisposed = false;
  statusChanged = new Signal<this, string>(this);
  iopubMessage = new Signal<this, any>(this);
  sent: any[] = [];
  comms: any[] = [];
  /** answer control messages (false: a kernel without chaz_nb, which never answers) */
  answers = true;
  stopReply: any = null;
  /** the hello's protocol: 2 takes the chat's send over control (1: an older chaz_nb) */
  protocol = 2;
  chatReply: any = null;
  commReply: any = null;

  sendControlMessage(msg: any): any {
    this.sent.push(msg);
    const future: any = { isDisposed: false, onReply: null, dispose: () => (future.isDisposed = true) };
    if (this.answers) {
      Promise.resolve().then(() => {
        const type = msg.header.msg_type;
        const content =
          type === 'chaz_stop_hello'
            ? { status: 'ok', protocol: this.protocol }
            : type === 'chaz_comm_msg'
            ? this.commReply ?? { status: 'ok', ok: true, message: '' }
            : type === 'chaz_chat_send'
            ? this.chatReply ?? {
                status: 'ok',
                type: 'sent',
                request_id: msg.content.request_id,
                ok: true,
                session_id: msg.content.session_id,
                message: `sent to @gpt (session ${msg.content.session_id})`
              }
            : this.stopReply ?? {
                status: 'ok',
                ok: true,
                session_id: msg.content.session_id,
                message: `stopped session ${msg.content.session_id} (teller, run 4, was running)`
              };
        future.onReply?.({ header: { msg_type: type.replace('request', 'reply').replace('send', 'reply').replace('msg', 'reply') }, content });
      });
    }
    return future;
  }
  createComm(target: string): any {
    const comm: any = {
      target, commId: `comm-${this.comms.length + 1}`, sent: [] as any[], isDisposed: false,
      open: () => undefined, close: () => undefined,
      send: (d: any) => comm.sent.push(d), onMsg: null, onClose: null
    };
    this.comms.push(comm);
    return comm;
  }
  of(type: string): any[] {
    return this.sent.filter(m => m.header.msg_type === type);
  }
}

const flush = () => new Promise(resolve => setTimeout(resolve, 0));

/** A cell output holding the live view's Stop button, as ipywidgets renders it. */
function output(doc: Document, sessionId: number | string): { node: HTMLElement; button: HTMLButtonElement } {
  const node = doc.createElement('div');
  const button = doc.createElement('button');
  button.className = `jupyter-widgets jupyter-button widget-button mod-danger chaz-stop chaz-stop-session-${sessionId}`;
  node.appendChild(button);
  return { node, button };
}

describe('stopButtonOf', () => {
  it('reads the session id of a cell output Stop button, from the button or its icon', () => {
    const { button } = output(document, 7);
    const icon = document.createElement('i');
    button.appendChild(icon);
    expect(stopButtonOf(button)?.sessionId).toBe(7);
    expect(stopButtonOf(icon)?.button).toBe(button);
  });

  it('ignores the sidebar Stop (no session class) and forged classes', () => {
    const sidebar = document.createElement('button');
    sidebar.className = 'jp-Button chaz-stop';
    expect(stopButtonOf(sidebar)).toBeNull();
    for (const bad of ['x', '-3', '1.5', '0', '99999999999999999999']) {
      expect(stopButtonOf(output(document, bad).button)).toBeNull();
    }
    expect(stopButtonOf(null)).toBeNull();
  });
});

describe('StopChannel', () => {
  it('is ready once the kernel answers the hello, and forgets it on a restart', async () => {
    const channel = new StopChannel();
    const kernel = new ControlKernel();
    expect(channel.isReady(kernel as any)).toBe(false);
    expect(await channel.hello(kernel as any)).toBe(true);
    expect(channel.isReady(kernel as any)).toBe(true);
    const [hello] = kernel.of('chaz_stop_hello');
    expect(hello.channel).toBe('control');
    expect(hello.header.session).toBe('client-1');
    kernel.statusChanged.emit('restarting');
    expect(channel.isReady(kernel as any)).toBe(false);
  });

  it('a kernel without chaz_nb never answers: not ready after the timeout', async () => {
    jest.useFakeTimers();
    try {
      const channel = new StopChannel();
      const kernel = new ControlKernel();
      kernel.answers = false;
      const asked = channel.hello(kernel as any);
      expect(channel.hello(kernel as any)).toBe(asked); // one hello in flight at a time
      jest.advanceTimersByTime(REPLY_TIMEOUT + 1);
      expect(await asked).toBe(false);
      expect(channel.isReady(kernel as any)).toBe(false);
      // no new hello right away (an older chaz_nb logs each one as unknown)...
      expect(await channel.hello(kernel as any)).toBe(false);
      expect(kernel.of('chaz_stop_hello')).toHaveLength(1);
      // ...but after a restart, the kernel is asked again
      kernel.statusChanged.emit('restarting');
      kernel.answers = true;
      const again = channel.hello(kernel as any);
      await Promise.resolve();
      await Promise.resolve();
      expect(await again).toBe(true);
      expect(kernel.of('chaz_stop_hello')).toHaveLength(2);
    } finally {
      jest.useRealTimers();
    }
  });

  it('a stop carries the session id and returns the kernel reply', async () => {
    const channel = new StopChannel();
    const kernel = new ControlKernel();
    const reply = await channel.stop(kernel as any, 3);
    expect(kernel.of('chaz_stop_request')[0].content).toEqual({ session_id: 3 });
    expect(reply).toEqual({ ok: true, session_id: 3, message: 'stopped session 3 (teller, run 4, was running)' });
    kernel.stopReply = { status: 'ok', ok: false, session_id: null, message: 'there is no session 9' };
    expect((await channel.stop(kernel as any, 9)).ok).toBe(false);
  });
});

describe('watchNotebook', () => {
  it('says hello when a Stop button appears, then sends its clicks over control, not to the widget', async () => {
    const channel = new StopChannel();
    const kernel = new ControlKernel();
    const notebook = document.createElement('div');
    document.body.appendChild(notebook);
    const unwatch = watchNotebook(notebook, () => kernel as any, channel);
    const { node, button } = output(document, 4);
    const widgetClicks: number[] = [];
    button.addEventListener('click', () => widgetClicks.push(1));
    notebook.appendChild(node);
    await flush(); // the MutationObserver
    await flush(); // the hello's reply
    expect(kernel.of('chaz_stop_hello')).toHaveLength(1);
    expect(channel.isReady(kernel as any)).toBe(true);

    button.click();
    expect(widgetClicks).toEqual([]); // taken before the widget's handler
    expect(button.disabled).toBe(true);
    expect(kernel.of('chaz_stop_request').map(m => m.content)).toEqual([{ session_id: 4 }]);
    await flush();
    expect(button.dataset.chazStop).toBe('stopped');
    unwatch();
    notebook.remove();
  });

  it('before the kernel answered a hello, a click goes the widget way', async () => {
    const channel = new StopChannel();
    const kernel = new ControlKernel();
    kernel.answers = false;
    const notebook = document.createElement('div');
    const { node, button } = output(document, 5);
    notebook.appendChild(node);
    const unwatch = watchNotebook(notebook, () => kernel as any, channel);
    const widgetClicks: number[] = [];
    button.addEventListener('click', () => widgetClicks.push(1));
    button.click();
    expect(widgetClicks).toEqual([1]);
    expect(kernel.of('chaz_stop_request')).toHaveLength(0);
    unwatch();
  });

  it('a refused stop enables the button again and says why', async () => {
    const channel = new StopChannel();
    const kernel = new ControlKernel();
    await channel.hello(kernel as any);
    kernel.stopReply = { status: 'ok', ok: false, session_id: 6, message: 'could not stop session 6: gone' };
    const notebook = document.createElement('div');
    const { node, button } = output(document, 6);
    notebook.appendChild(node);
    const unwatch = watchNotebook(notebook, () => kernel as any, channel);
    button.click();
    await flush();
    expect(button.disabled).toBe(false);
    expect(button.title).toBe('could not stop session 6: gone');
    unwatch();
  });
});

describe('the sidebar client', () => {
  it('stops over control once the kernel answered a hello, else over the comm', async () => {
    const kernel = new ControlKernel();
    const context: any = {
      kernelChanged: new Signal<any, any>({}),
      statusChanged: new Signal<any, string>({}),
      session: { kernel }
    };
    const client = new ChazClient();
    const stopped: any[] = [];
    client.stopped.connect((_, msg) => stopped.push(msg));
    client.follow(context);
    const comm = kernel.comms[0];
    comm.onMsg({ content: { data: { type: 'state', sessions: [], pending: [] } } });
    expect(client.status).toBe('connected');
    await flush(); // the client's hello, answered
    expect(stopChannel.isReady(kernel as any)).toBe(true);
    expect(client.stop(2)).toBe(true);
    expect(comm.sent).toEqual([]); // not the comm: a waiting cell would hold it
    expect(kernel.of('chaz_stop_request').map(m => m.content)).toEqual([{ session_id: 2 }]);
    await flush();
    expect(stopped).toEqual([
      { type: 'stopped', session_id: 2, ok: true, message: 'stopped session 2 (teller, run 4, was running)' }
    ]);
    kernel.statusChanged.emit('restarting'); // a restarted kernel has to say hello again
    expect(client.stop(2)).toBe(true);
    expect(comm.sent).toEqual([{ type: 'stop', session_id: 2 }]);
    expect(kernel.of('chaz_stop_request')).toHaveLength(1);
    client.dispose();
  });

  /** A client connected to `kernel` (its hello answered). */
  async function connected(kernel: ControlKernel): Promise<{ client: ChazClient; comm: any; sent: any[] }> {
    const context: any = {
      kernelChanged: new Signal<any, any>({}),
      statusChanged: new Signal<any, string>({}),
      session: { kernel }
    };
    const client = new ChazClient();
    const sent: any[] = [];
    client.sent.connect((_, msg) => sent.push(msg));
    client.follow(context);
    const comm = kernel.comms[0];
    comm.onMsg({ content: { data: { type: 'state', sessions: [], pending: [] } } });
    await flush(); // the client's hello, answered
    return { client, comm, sent };
  }

  it("sends the chat's Message over control once the kernel said protocol 2, naming its comm", async () => {
    const kernel = new ControlKernel();
    const { client, comm, sent } = await connected(kernel);
    expect(stopChannel.protocolOf(kernel as any)).toBe(2);
    expect(client.send({ type: 'send', request_id: 'send-1', text: 'hi', session_id: 3 })).toBe(true);
    expect(comm.sent).toEqual([]); // not the comm: a waiting cell would hold it
    const [msg] = kernel.of('chaz_chat_send');
    expect(msg.channel).toBe('control');
    expect(msg.content).toEqual({ request_id: 'send-1', text: 'hi', session_id: 3, comm_id: 'comm-1' });
    await flush();
    expect(sent).toEqual([
      { type: 'sent', request_id: 'send-1', ok: true, session_id: 3, message: 'sent to @gpt (session 3)' }
    ]);
    // opening a chat (and "show earlier") go over control too, answered on the comm
    expect(client.send({ type: 'chat_open', session_id: 3 })).toBe(true);
    expect(comm.sent).toEqual([]);
    expect(kernel.of('chaz_comm_msg').map(m => m.content)).toEqual([
      { comm_id: 'comm-1', data: { type: 'chat_open', session_id: 3 } }
    ]);
    await flush();
    expect(comm.sent).toEqual([]); // handed over (ok): nothing on the comm
    // a comm the kernel does not know of (ok false): sent on the comm after all
    kernel.commReply = { status: 'ok', ok: false, message: "no chaz comm 'comm-1' in this kernel" };
    client.send({ type: 'chat_close' });
    expect(comm.sent).toEqual([]);
    await flush();
    expect(comm.sent).toEqual([{ type: 'chat_close' }]);
    // Approve / Deny and Refresh stay on the comm
    client.decide('r1', 'approve');
    client.send({ type: 'refresh' });
    expect(comm.sent.slice(1)).toEqual([
      { type: 'decide', request_id: 'r1', decision: 'approve', reason: null },
      { type: 'refresh' }
    ]);
    expect(kernel.of('chaz_comm_msg')).toHaveLength(2);
    client.dispose();
  });

  it('an older chaz_nb (protocol 1) and a restarted kernel get the send over the comm', async () => {
    const kernel = new ControlKernel();
    kernel.protocol = 1;
    const { client, comm } = await connected(kernel);
    expect(stopChannel.isReady(kernel as any)).toBe(true); // Stop goes over control...
    client.send({ type: 'send', request_id: 'send-1', text: 'hi', session_id: 3 });
    expect(comm.sent).toEqual([{ type: 'send', request_id: 'send-1', text: 'hi', session_id: 3 }]); // ...the chat not
    expect(kernel.of('chaz_chat_send')).toEqual([]);
    client.dispose();

    const fresh = new ControlKernel();
    const other = await connected(fresh);
    fresh.statusChanged.emit('restarting');
    other.client.send({ type: 'send', request_id: 'send-2', text: 'hi', session_id: 3 });
    expect(other.comm.sent).toHaveLength(1);
    expect(fresh.of('chaz_chat_send')).toEqual([]);
    other.client.dispose();
  });

  it('a refusal, a queued send and a kernel that does not answer are each a sent the chat shows', async () => {
    const kernel = new ControlKernel();
    const { client, sent } = await connected(kernel);
    kernel.chatReply = { status: 'ok', type: 'sent', request_id: 'send-1', ok: false, session_id: null,
                         message: 'send: there is no session 99' };
    client.send({ type: 'send', request_id: 'send-1', text: 'hi', session_id: 99 });
    await flush();
    expect(sent.pop()).toEqual({ type: 'sent', request_id: 'send-1', ok: false, session_id: null,
                                 message: 'send: there is no session 99' });
    kernel.chatReply = { status: 'ok', type: 'sent', request_id: 'send-2', ok: true, queued: true, session_id: null,
                         message: 'the kernel is busy running code; the message is written when it is free' };
    client.send({ type: 'send', request_id: 'send-2', text: 'hi', session_id: 3 });
    await flush();
    expect(sent.pop()).toMatchObject({ request_id: 'send-2', ok: true, queued: true });
    jest.useFakeTimers();
    try {
      kernel.answers = false;
      client.send({ type: 'send', request_id: 'send-3', text: 'hi', session_id: 3 });
      jest.advanceTimersByTime(REPLY_TIMEOUT + 1);
    } finally {
      jest.useRealTimers();
    }
    await flush();
    expect(sent.pop()).toEqual({ type: 'sent', request_id: 'send-3', ok: false, session_id: null,
                                 message: 'The kernel did not answer: check the transcript, then send again.' });
    client.dispose();
  });

  it("the chat's messages are control types the page does not track (stop-plugin.ts)", () => {
    expect(CONTROL_TYPES).toEqual(['chaz_stop_hello', 'chaz_stop_request', 'chaz_chat_send', 'chaz_comm_msg']);
  });
});
