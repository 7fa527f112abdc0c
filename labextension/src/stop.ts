/**
 * Stop over the kernel's control channel, so a Stop click acts while a cell waits.
 *
 * A `%chaz @NAME` cell waits for its run inside the kernel, and the kernel reads shell-channel
 * messages (widget clicks, the sidebar's comm) only once that wait returns. The control
 * channel is read on a thread of its own; chaz_nb registers two messages there
 * (chaz_nb/notebook/stop_control.py):
 *
 * - `chaz_stop_hello` `{}` -> `{status: "ok", protocol: 2}`: this frontend delivers Stop over
 *   control; the kernel's Stop rows then stop saying that a click waits for the cell.
 *   Protocol 2 (chaz_nb/notebook/chat_control.py): the sidebar chat's send goes over control
 *   too (`chaz_chat_send`), and so do opening a chat and "show earlier" (`chaz_comm_msg`),
 *   sent by ./client.
 * - `chaz_stop_request` `{session_id}` -> `{status, ok, session_id, message}`: stop that
 *   session's run, as a click on its Stop button does.
 *
 * A kernel without chaz_nb loaded does not answer (ipykernel logs an unknown message type), so
 * every request has a timeout. A kernel is "ready" once it answered a hello; a restart forgets.
 */
import { Kernel } from '@jupyterlab/services';

export const STOP_HELLO = 'chaz_stop_hello';
export const STOP_REQUEST = 'chaz_stop_request';
/** The sidebar chat's send over control (chaz_nb/notebook/chat_control.py; protocol 2). */
export const CHAT_SEND = 'chaz_chat_send';
/** The chat's reads of the sidebar's comm over control (protocol 2), answered on the comm. */
export const COMM_MSG = 'chaz_comm_msg';
/** The comm messages a `chaz_comm_msg` carries (the kernel refuses others). */
export const CONTROL_COMM_TYPES: string[] = ['chat_open', 'chat_close', 'page'];
/** The control message types of chaz (the page does not track their busy/idle). */
export const CONTROL_TYPES = [STOP_HELLO, STOP_REQUEST, CHAT_SEND, COMM_MSG];
/** The class of a chaz Stop button in a cell output that carries its session id. */
export const SESSION_CLASS = 'chaz-stop-session-';
/** How long a request waits for its reply (ms). */
export const REPLY_TIMEOUT = 4000;
/** After a hello nobody answered, the next one to that kernel waits this long (ms). */
export const HELLO_RETRY = 30000;

/** A kernel's answer to a stop request (or the frontend's own when there was none). */
export interface IStopReply {
  ok: boolean;
  session_id: number | null;
  message: string;
  /** the kernel was busy in a cell's own code: the stop happens when it is free */
  queued?: boolean;
}

/** What the channel needs of a kernel connection (a subset of Kernel.IKernelConnection). */
export type StopKernel = Pick<
  Kernel.IKernelConnection,
  'sendControlMessage' | 'clientId' | 'username' | 'statusChanged' | 'isDisposed'
>;

/** The session id of the chaz Stop button that `target` is in (a cell output's), or null. */
export function stopButtonOf(target: EventTarget | null): { button: HTMLButtonElement; sessionId: number } | null {
  const el = target as Element | null;
  if (!el || typeof el.closest !== 'function') {
    return null;
  }
  const button = el.closest('button.chaz-stop') as HTMLButtonElement | null;
  if (!button) {
    return null;
  }
  for (const name of Array.from(button.classList)) {
    if (name.startsWith(SESSION_CLASS)) {
      const id = Number(name.slice(SESSION_CLASS.length));
      if (Number.isSafeInteger(id) && id > 0) {
        return { button, sessionId: id };
      }
    }
  }
  return null;
}

let counter = 0;

/** A control-channel message of our own type (KernelMessage.createMessage knows only the spec's). */
function controlMessage(kernel: StopKernel, msgType: string, content: object): any {
  counter += 1;
  return {
    header: {
      msg_id: `chaz-stop-${Date.now().toString(36)}-${counter}-${Math.random().toString(36).slice(2, 10)}`,
      msg_type: msgType,
      session: kernel.clientId,
      username: kernel.username,
      date: new Date().toISOString(),
      version: '5.3'
    },
    parent_header: {},
    metadata: {},
    content,
    channel: 'control',
    buffers: []
  };
}

/** Send a control message; its reply's content, or null after `timeout` ms or on a send error. */
export function request(kernel: StopKernel, msgType: string, content: object, timeout = REPLY_TIMEOUT): Promise<any | null> {
  return new Promise(resolve => {
    let future: Kernel.IControlFuture | null = null;
    let settled = false;
    const settle = (value: any | null) => {
      if (settled) {
        return;
      }
      settled = true;
      window.clearTimeout(timer);
      resolve(value);
    };
    const timer = window.setTimeout(() => {
      settle(null);
      if (future && !future.isDisposed) {
        future.dispose(); // no reply will come (chaz_nb not loaded): forget it
      }
    }, timeout);
    try {
      future = kernel.sendControlMessage(controlMessage(kernel, msgType, content), true, true);
      future.onReply = (reply: any) => settle(reply?.content ?? null);
    } catch (err) {
      console.warn('chaz: control message failed', err);
      settle(null);
    }
  });
}

/** Which kernels deliver Stop over control (answered a hello), per kernel connection. */
export class StopChannel {
  /** True once the kernel answered a hello (until it restarts). */
  isReady(kernel: StopKernel | null | undefined): boolean {
    return !!kernel && this._ready.has(kernel);
  }

  /** The protocol a ready kernel answered the hello with (0: not ready); 2 takes the chat's send. */
  protocolOf(kernel: StopKernel | null | undefined): number {
    return kernel && this._ready.has(kernel) ? this._protocol.get(kernel) ?? 1 : 0;
  }

  /** Say hello (once at a time per kernel); resolves whether the kernel answered. */
  hello(kernel: StopKernel): Promise<boolean> {
    if (this._ready.has(kernel)) {
      return Promise.resolve(true);
    }
    if (typeof kernel.sendControlMessage !== 'function') {
      return Promise.resolve(false); // not a kernel connection we can talk control to
    }
    const pending = this._pending.get(kernel);
    if (pending) {
      return pending;
    }
    const failed = this._failed.get(kernel);
    if (failed !== undefined && Date.now() - failed < HELLO_RETRY) {
      return Promise.resolve(false); // an older chaz_nb: do not fill the kernel's log with hellos
    }
    this._watch(kernel);
    const asked = request(kernel, STOP_HELLO, {}).then(reply => {
      this._pending.delete(kernel);
      const ok = !!reply && reply.status === 'ok';
      if (ok && !kernel.isDisposed) {
        this._ready.add(kernel);
        this._protocol.set(kernel, typeof reply.protocol === 'number' ? reply.protocol : 1);
        this._failed.delete(kernel);
      } else {
        this._failed.set(kernel, Date.now());
      }
      return ok;
    });
    this._pending.set(kernel, asked);
    return asked;
  }

  /** Ask the kernel to stop a session's run over control. */
  async stop(kernel: StopKernel, sessionId: number): Promise<IStopReply> {
    const reply = await request(kernel, STOP_REQUEST, { session_id: sessionId });
    if (!reply) {
      return { ok: false, session_id: sessionId, message: `the kernel did not answer the stop of session ${sessionId}` };
    }
    return {
      ok: !!reply.ok,
      session_id: typeof reply.session_id === 'number' ? reply.session_id : null,
      message: String(reply.message ?? ''),
      ...(reply.queued ? { queued: true } : {})
    };
  }

  /** A restarted or dead kernel has forgotten the hello (chaz_nb must be loaded again). */
  private _watch(kernel: StopKernel): void {
    if (this._watched.has(kernel)) {
      return;
    }
    this._watched.add(kernel);
    kernel.statusChanged?.connect((_: unknown, status: Kernel.Status) => {
      if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
        this._ready.delete(kernel);
        this._failed.delete(kernel);
      }
    });
  }

  private _ready = new WeakSet<StopKernel>();
  private _protocol = new WeakMap<StopKernel, number>();
  private _watched = new WeakSet<StopKernel>();
  private _pending = new WeakMap<StopKernel, Promise<boolean>>();
  private _failed = new WeakMap<StopKernel, number>();
}

/** The one channel of the page: the stop plugin and the sidebar's client share it. */
export const stopChannel = new StopChannel();

/** Hook one notebook: hello when a Stop button shows up, clicks over control once ready. */
export function watchNotebook(
  node: HTMLElement,
  kernelOf: () => StopKernel | null,
  channel: StopChannel = stopChannel
): () => void {
  const greet = () => {
    const kernel = kernelOf();
    if (kernel && !kernel.isDisposed && !channel.isReady(kernel)) {
      void channel.hello(kernel);
    }
  };
  const selector = `button.chaz-stop[class*="${SESSION_CLASS}"]`;
  const observer = new MutationObserver(records => {
    for (const record of records) {
      for (const added of Array.from(record.addedNodes)) {
        const el = added as Element;
        if (el.nodeType === 1 && (el.matches?.(selector) || el.querySelector?.(selector))) {
          greet();
          return;
        }
      }
    }
  });
  observer.observe(node, { childList: true, subtree: true });
  if (node.querySelector(selector)) {
    greet();
  }

  const onClick = (event: MouseEvent) => {
    const hit = stopButtonOf(event.target);
    if (!hit) {
      return;
    }
    const kernel = kernelOf();
    if (!kernel || !channel.isReady(kernel)) {
      greet(); // this click goes the widget's way; the next one over control
      return;
    }
    // ours: the widget would get the click only after the cell's wait
    event.preventDefault();
    event.stopImmediatePropagation();
    const { button, sessionId } = hit;
    if (button.disabled) {
      return;
    }
    button.disabled = true; // one click, one stop (the kernel disables it too)
    button.dataset.chazStop = 'sent';
    void channel.stop(kernel, sessionId).then(reply => {
      button.dataset.chazStop = reply.ok ? 'stopped' : 'failed';
      if (!reply.ok) {
        button.disabled = false;
        button.title = reply.message;
      }
    });
  };
  node.addEventListener('click', onClick, true);
  return () => {
    observer.disconnect();
    node.removeEventListener('click', onClick, true);
  };
}
