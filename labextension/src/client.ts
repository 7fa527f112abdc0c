/**
 * The frontend end of the `chaz` kernel comm for one notebook session context.
 *
 * It opens a comm to the kernel of the notebook it follows, reconnects when the
 * kernel changes or restarts, and, while chaz is not loaded in the kernel,
 * retries (throttled) each time a cell finishes executing, so running
 * `%load_ext chaz_nb` in the notebook connects the sidebar without a click.
 *
 * Only execute_request idles count as "a cell finished": the kernel also goes
 * busy -> idle for our own comm_open, and reacting to that would retry forever.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { Kernel, KernelMessage } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import { chatMessage, sentMessage } from './chat';
import { CHAT_SEND, COMM_MSG, CONTROL_COMM_TYPES, request, stopChannel } from './stop';

import {
  COMM_TARGET,
  FrontendToKernel,
  IChatMessage,
  IDecidedMessage,
  IPage,
  ISentMessage,
  IStateMessage,
  IStoppedMessage
} from './types';

export type ConnectionStatus =
  | 'no-notebook'
  | 'no-kernel'
  | 'connecting'
  | 'unavailable'
  | 'connected'
  | 'disconnected';

/** Minimum time between two automatic connection attempts (ms). */
export const RETRY_INTERVAL = 1500;

export class ChazClient {
  get statusChanged(): ISignal<this, ConnectionStatus> {
    return this._statusChanged;
  }
  get stateReceived(): ISignal<this, IStateMessage> {
    return this._stateReceived;
  }
  get decided(): ISignal<this, IDecidedMessage> {
    return this._decided;
  }
  get stopped(): ISignal<this, IStoppedMessage> {
    return this._stopped;
  }
  /** the sidebar chat's followed session (checked: see chat.ts `chatMessage`) */
  get chatReceived(): ISignal<this, IChatMessage> {
    return this._chatReceived;
  }
  /** the answers to `send` */
  get sent(): ISignal<this, ISentMessage> {
    return this._sent;
  }
  get status(): ConnectionStatus {
    return this._status;
  }
  get state(): IStateMessage | null {
    return this._state;
  }
  get sessionContext(): ISessionContext | null {
    return this._context;
  }

  /** Follow another notebook's session context (or none). */
  follow(context: ISessionContext | null): void {
    if (context === this._context) {
      return;
    }
    if (this._context) {
      this._context.kernelChanged.disconnect(this._onKernelChanged, this);
      this._context.statusChanged.disconnect(this._onKernelStatus, this);
    }
    this._closeComm();
    this._context = context;
    this._state = null;
    if (context) {
      context.kernelChanged.connect(this._onKernelChanged, this);
      context.statusChanged.connect(this._onKernelStatus, this);
    }
    this.connect();
  }

  /** (Re)open the comm to the followed kernel. */
  connect(): void {
    this._closeComm();
    this._lastAttempt = Date.now();
    const context = this._context;
    if (!context) {
      this._setStatus('no-notebook');
      return;
    }
    const kernel = context.session?.kernel ?? null;
    if (!kernel || kernel.isDisposed) {
      this._setStatus('no-kernel');
      return;
    }
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(COMM_TARGET);
    } catch (err) {
      console.warn('chaz: could not create comm', err);
      this._setStatus('unavailable');
      return;
    }
    this._comm = comm;
    this._watch(kernel);
    this._gotState = false;
    comm.onMsg = (msg: KernelMessage.ICommMsgMsg) => {
      if (comm !== this._comm) {
        return;
      }
      this._handle(msg.content.data as any);
    };
    comm.onClose = () => {
      if (comm !== this._comm) {
        return;
      }
      this._comm = null;
      this._settlePages();
      this._setStatus(this._gotState ? 'disconnected' : 'unavailable');
    };
    this._setStatus('connecting');
    try {
      comm.open({});
    } catch (err) {
      console.warn('chaz: could not open comm', err);
      this._comm = null;
      this._setStatus('unavailable');
    }
  }

  /**
   * Send a message to the kernel; false when not connected. Over the control channel when the
   * kernel takes it (hello protocol 2, chaz_nb/notebook/chat_control.py): the comm is read only
   * once a waiting cell's wait ends, so "Sending…" would last that long. The chat's `send` is a
   * `chaz_chat_send` (its reply is the `sent`); opening a chat and "show earlier" a
   * `chaz_comm_msg`, answered on the comm; the rest (Approve / Deny, Refresh) goes on the comm.
   */
  send(msg: FrontendToKernel): boolean {
    const comm = this._comm;
    if (!comm || comm.isDisposed || this._status !== 'connected') {
      return false;
    }
    const kernel = this._kernel;
    if (kernel && stopChannel.protocolOf(kernel) >= 2) {
      if (msg.type === 'send') {
        this._sendOverControl(kernel, comm.commId, msg);
      } else if (!CONTROL_COMM_TYPES.includes(msg.type)) {
        return this._sendOnComm(comm, msg); // Approve / Deny, Refresh: the comm's way
      } else {
        // the kernel hands it to this comm's handler and answers on the comm, as if it came there
        void request(kernel, COMM_MSG, { comm_id: comm.commId, data: msg }).then(reply => {
          if (reply && reply.ok === false && comm === this._comm) {
            this._sendOnComm(comm, msg); // a comm the kernel does not know of: the comm's way
          }
        });
      }
      return true;
    }
    return this._sendOnComm(comm, msg);
  }

  private _sendOnComm(comm: Kernel.IComm, msg: FrontendToKernel): boolean {
    try {
      comm.send(msg as any);
      return true;
    } catch (err) {
      console.warn('chaz: send failed', err);
      return false;
    }
  }

  /** The chat's send as a `chaz_chat_send`; its reply (or its absence) is a `sent`. */
  private _sendOverControl(
    kernel: Kernel.IKernelConnection,
    commId: string,
    msg: Extract<FrontendToKernel, { type: 'send' }>
  ): void {
    const { type: _type, ...fields } = msg;
    void request(kernel, CHAT_SEND, { ...fields, comm_id: commId }).then(reply => {
      const sent = reply
        ? sentMessage({ ...reply, type: 'sent' })
        : null;
      this._sent.emit(
        sent ?? {
          type: 'sent',
          request_id: msg.request_id,
          ok: false,
          session_id: null,
          message: 'The kernel did not answer: check the transcript, then send again.'
        }
      );
    });
  }

  refresh(): void {
    if (!this.send({ type: 'refresh' })) {
      this.connect();
    }
  }

  decide(
    requestId: string,
    decision: 'approve' | 'deny' | 'approve_all',
    reason: string | null = null,
    args?: { [key: string]: unknown } | string
  ): boolean {
    return this.send({
      type: 'decide',
      request_id: requestId,
      decision,
      reason: reason ? reason : null,
      ...(args === undefined ? {} : { arguments: args })
    });
  }

  /**
   * Ask the kernel to stop the run of a session (as `%chaz stop SESSION`); false when not
   * connected. Over the control channel when the kernel takes it (./stop): the comm is read
   * only once a waiting cell's wait ends.
   */
  stop(sessionId: number): boolean {
    const kernel = this._kernel;
    if (kernel && stopChannel.isReady(kernel) && this._status === 'connected') {
      void stopChannel.stop(kernel, sessionId).then(r =>
        this._stopped.emit({ type: 'stopped', session_id: sessionId, ok: r.ok, message: r.message })
      );
      return true;
    }
    return this.send({ type: 'stop', session_id: sessionId });
  }

  /**
   * The page of a session's entries before `beforeSeq` (the transcript's "show earlier"), from
   * the followed kernel; null when it is not connected or answers with an error.
   */
  page(sessionId: number, beforeSeq: number, limit = 50): Promise<IPage | null> {
    const requestId = `page-${++this._pageCounter}`;
    return new Promise(resolve => {
      this._pages.set(requestId, resolve);
      if (
        !this.send({ type: 'page', request_id: requestId, session_id: sessionId, before_seq: beforeSeq, limit })
      ) {
        this._pages.delete(requestId);
        resolve(null);
      }
    });
  }

  dispose(): void {
    this._settlePages();
    this.follow(null);
    Signal.clearData(this);
  }

  private _handle(data: any): void {
    if (!data || typeof data !== 'object') {
      return;
    }
    if (data.type === 'state') {
      const state: IStateMessage = {
        type: 'state',
        sessions: Array.isArray(data.sessions) ? data.sessions : [],
        pending: Array.isArray(data.pending) ? data.pending : [],
        agents: Array.isArray(data.agents) ? data.agents.filter((a: unknown) => typeof a === 'string') : []
      };
      this._gotState = true;
      this._state = state;
      this._setStatus('connected');
      if (this._kernel && !stopChannel.isReady(this._kernel)) {
        void stopChannel.hello(this._kernel); // chaz is loaded: Stop may go over control
      }
      this._stateReceived.emit(state);
    } else if (data.type === 'page') {
      const resolve = this._pages.get(String(data.request_id ?? ''));
      if (resolve) {
        this._pages.delete(String(data.request_id));
        resolve(
          data.ok && Array.isArray(data.entries)
            ? {
                entries: data.entries,
                first_seq: typeof data.first_seq === 'number' ? data.first_seq : null,
                earlier: typeof data.earlier === 'number' ? data.earlier : 0
              }
            : null
        );
      }
    } else if (data.type === 'decided') {
      this._decided.emit({
        type: 'decided',
        request_id: String(data.request_id ?? ''),
        ok: !!data.ok,
        message: String(data.message ?? '')
      });
    } else if (data.type === 'chat' || data.type === 'sent') {
      // the kernel's chat messages, checked field by field (anything malformed is dropped)
      const chat = data.type === 'chat' ? chatMessage(data) : null;
      const sent = data.type === 'sent' ? sentMessage(data) : null;
      if (chat) {
        this._chatReceived.emit(chat);
      } else if (sent) {
        this._sent.emit(sent);
      }
    } else if (data.type === 'stopped') {
      this._stopped.emit({
        type: 'stopped',
        session_id: Number(data.session_id),
        ok: !!data.ok,
        message: String(data.message ?? '')
      });
    }
  }

  private _onKernelChanged(): void {
    this._state = null;
    this.connect();
  }

  private _onKernelStatus(_: ISessionContext, status: Kernel.Status): void {
    if (
      status === 'restarting' ||
      status === 'autorestarting' ||
      status === 'dead'
    ) {
      this._comm = null;
      this._state = null;
      this._setStatus(status === 'dead' ? 'no-kernel' : 'connecting');
      this._needsRetry = true;
      return;
    }
    if (status === 'idle' && this._needsRetry) {
      this._scheduleRetry();
    }
  }

  /** Listen to the iopub stream of the kernel we talk to (for cell ends). */
  private _watch(kernel: Kernel.IKernelConnection | null): void {
    if (kernel === this._kernel) {
      return;
    }
    if (this._kernel && this._kernel.iopubMessage) {
      this._kernel.iopubMessage.disconnect(this._onIOPub, this);
    }
    this._kernel = kernel;
    if (kernel && kernel.iopubMessage) {
      kernel.iopubMessage.connect(this._onIOPub, this);
    }
  }

  private _onIOPub(
    _: Kernel.IKernelConnection,
    msg: KernelMessage.IIOPubMessage
  ): void {
    if (
      msg.header.msg_type !== 'status' ||
      (msg.parent_header as any)?.msg_type !== 'execute_request' ||
      (msg.content as any).execution_state !== 'idle'
    ) {
      return;
    }
    // A cell finished: if chaz was not reachable, try again.
    if (
      this._status === 'unavailable' ||
      this._status === 'disconnected' ||
      this._needsRetry
    ) {
      this._scheduleRetry();
    }
  }

  private _scheduleRetry(): void {
    if (this._retryTimer !== null) {
      return;
    }
    const wait = Math.max(0, this._lastAttempt + RETRY_INTERVAL - Date.now());
    this._retryTimer = window.setTimeout(() => {
      this._retryTimer = null;
      this._needsRetry = false;
      this.connect();
    }, wait);
  }

  private _closeComm(): void {
    if (this._retryTimer !== null) {
      window.clearTimeout(this._retryTimer);
      this._retryTimer = null;
    }
    const comm = this._comm;
    this._comm = null;
    this._watch(null);
    this._settlePages();
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        /* kernel already gone */
      }
    }
  }

  /** Pages asked for on a comm that is gone get no answer: resolve them as null. */
  private _settlePages(): void {
    const waiting = Array.from(this._pages.values());
    this._pages.clear();
    waiting.forEach(resolve => resolve(null));
  }

  private _setStatus(status: ConnectionStatus): void {
    if (status === this._status) {
      return;
    }
    this._status = status;
    this._statusChanged.emit(status);
  }

  private _context: ISessionContext | null = null;
  private _comm: Kernel.IComm | null = null;
  private _kernel: Kernel.IKernelConnection | null = null;
  private _status: ConnectionStatus = 'no-notebook';
  private _state: IStateMessage | null = null;
  private _gotState = false;
  private _needsRetry = false;
  private _lastAttempt = 0;
  private _retryTimer: number | null = null;
  private _pageCounter = 0;
  private _pages = new Map<string, (page: IPage | null) => void>();
  private _statusChanged = new Signal<this, ConnectionStatus>(this);
  private _stateReceived = new Signal<this, IStateMessage>(this);
  private _decided = new Signal<this, IDecidedMessage>(this);
  private _stopped = new Signal<this, IStoppedMessage>(this);
  private _chatReceived = new Signal<this, IChatMessage>(this);
  private _sent = new Signal<this, ISentMessage>(this);
}
