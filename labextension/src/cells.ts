/**
 * Approved agent code as notebook cells (issue 44 §1).
 *
 * For each notebook, a `chaz` comm opened with `{role: "cells"}` (chaz_nb/notebook/labcomm.py)
 * receives `{type: "cell", session_id, cell_id, source, outputs, metadata}` when a person
 * approved a `kernel__run` and its code ran. The code is inserted as a code cell below the cell
 * whose id is `cell_id` (none, or a cell no longer there: at the end of the notebook), with the
 * outputs as the code produced them and the `chaz` metadata; it is not run.
 *
 * The comm opens when the notebook's kernel is there; while chaz_nb is not loaded in it (the
 * kernel closes the comm at once) it tries again after a cell finishes, and after a restart.
 */
import { ISessionContext } from '@jupyterlab/apputils';
import { Kernel, KernelMessage } from '@jupyterlab/services';

import { COMM_TARGET } from './types';

/** Minimum time between two automatic connection attempts (ms). */
export const CELLS_RETRY_INTERVAL = 1500;

/** The `chaz` metadata of an inserted cell. */
export interface IChazCellMeta {
  session: number;
  tool_call: string;
  agent: string;
  model: string | null;
  approved_by: string;
  edited: boolean;
  code_sha256: string;
}

/** A `cell` message, checked. */
export interface IAgentCell {
  sessionId: number;
  /** the cell that asked; null: the sidebar chat (the end of the notebook) */
  cellId: string | null;
  source: string;
  outputs: any[];
  chaz: IChazCellMeta;
}

const OUTPUT_TYPES = ['stream', 'display_data', 'execute_result', 'error'];

function isOutput(o: any): boolean {
  if (!o || typeof o !== 'object' || !OUTPUT_TYPES.includes(o.output_type)) {
    return false;
  }
  if (o.output_type === 'stream') {
    return (o.name === 'stdout' || o.name === 'stderr') && typeof o.text === 'string';
  }
  if (o.output_type === 'error') {
    return typeof o.ename === 'string' && typeof o.evalue === 'string' && Array.isArray(o.traceback);
  }
  return !!o.data && typeof o.data === 'object' && !Array.isArray(o.data);
}

/** The `cell` message as an agent cell, or null when it is not one (a bad field). */
export function agentCell(data: any): IAgentCell | null {
  if (!data || data.type !== 'cell' || typeof data.source !== 'string') {
    return null;
  }
  const chaz = data.metadata && typeof data.metadata === 'object' ? data.metadata.chaz : null;
  if (
    !chaz ||
    typeof chaz !== 'object' ||
    typeof chaz.session !== 'number' ||
    typeof chaz.tool_call !== 'string' ||
    typeof chaz.agent !== 'string' ||
    typeof chaz.code_sha256 !== 'string'
  ) {
    return null;
  }
  const outputs = Array.isArray(data.outputs) ? data.outputs.filter(isOutput) : [];
  return {
    sessionId: Number(data.session_id),
    cellId: typeof data.cell_id === 'string' && data.cell_id ? data.cell_id : null,
    source: data.source,
    outputs: outputs.map((o: any) =>
      o.output_type === 'execute_result'
        ? { ...o, metadata: o.metadata ?? {}, execution_count: null }
        : o.output_type === 'display_data'
          ? { ...o, metadata: o.metadata ?? {} }
          : o
    ),
    chaz: {
      session: chaz.session,
      tool_call: chaz.tool_call,
      agent: chaz.agent,
      model: typeof chaz.model === 'string' ? chaz.model : null,
      approved_by: typeof chaz.approved_by === 'string' ? chaz.approved_by : 'user',
      edited: chaz.edited === true,
      code_sha256: chaz.code_sha256
    }
  };
}

/** What inserting needs of a notebook's shared model (a subset of YNotebook). */
export interface ICellsNotebook {
  cells: ReadonlyArray<{ id: string; getMetadata?: (key: string) => any }>;
  insertCell(index: number, cell: any): unknown;
}

/**
 * Insert `cell` below the cell whose id is `cell.cellId` (else at the end); the index it got.
 * A cell already in the notebook for the same ToolCall is not inserted twice (a second comm).
 */
export function insertAgentCell(notebook: ICellsNotebook, cell: IAgentCell): number {
  const cells = notebook.cells;
  for (let i = 0; i < cells.length; i++) {
    const meta = cells[i].getMetadata ? cells[i].getMetadata!('chaz') : undefined;
    if (meta && meta.tool_call === cell.chaz.tool_call && meta.session === cell.chaz.session) {
      return i;
    }
  }
  let index = cells.length;
  if (cell.cellId !== null) {
    const asking = cells.findIndex(c => c.id === cell.cellId);
    if (asking >= 0) {
      index = asking + 1;
      // the agent's earlier cells for the same asking cell come first: keep their order
      while (index < cells.length) {
        const meta = cells[index].getMetadata ? cells[index].getMetadata!('chaz') : undefined;
        if (!meta || meta.session !== cell.chaz.session) {
          break;
        }
        index += 1;
      }
    }
  }
  notebook.insertCell(index, {
    cell_type: 'code',
    source: cell.source,
    outputs: cell.outputs,
    execution_count: null,
    metadata: { chaz: { ...cell.chaz } }
  });
  return index;
}

/** One notebook's `cells` comm to its kernel, reopened as the kernel changes. */
export class CellsLink {
  constructor(
    private readonly _context: ISessionContext,
    private readonly _notebook: () => ICellsNotebook | null
  ) {
    _context.kernelChanged.connect(this._connect, this);
    _context.statusChanged.connect(this._onStatus, this);
    this._connect();
  }

  /** The comm is open (chaz_nb is loaded in the kernel, as far as this side knows). */
  get connected(): boolean {
    return this._comm !== null;
  }

  dispose(): void {
    this._disposed = true;
    this._context.kernelChanged.disconnect(this._connect, this);
    this._context.statusChanged.disconnect(this._onStatus, this);
    this._close();
  }

  private _connect(): void {
    this._close();
    if (this._disposed) {
      return;
    }
    const kernel = this._context.session?.kernel ?? null;
    if (!kernel || kernel.isDisposed) {
      return;
    }
    this._watch(kernel);
    this._lastAttempt = Date.now();
    let comm: Kernel.IComm;
    try {
      comm = kernel.createComm(COMM_TARGET);
    } catch (err) {
      return;
    }
    this._comm = comm;
    comm.onMsg = (msg: KernelMessage.ICommMsgMsg) => {
      const cell = agentCell(msg.content.data);
      const notebook = this._notebook();
      if (cell && notebook) {
        insertAgentCell(notebook, cell);
      }
    };
    comm.onClose = () => {
      if (this._comm === comm) {
        this._comm = null; // chaz_nb not loaded (yet): the next cell's end tries again
      }
    };
    try {
      comm.open({ role: 'cells' });
    } catch {
      this._comm = null;
    }
  }

  private _onStatus(_: ISessionContext, status: Kernel.Status): void {
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      this._comm = null;
      this._retry = true;
    } else if (status === 'idle' && this._retry) {
      this._schedule();
    }
  }

  private _watch(kernel: Kernel.IKernelConnection): void {
    if (kernel === this._kernel) {
      return;
    }
    this._kernel?.iopubMessage.disconnect(this._onIOPub, this);
    this._kernel = kernel;
    kernel.iopubMessage.connect(this._onIOPub, this);
  }

  private _onIOPub(_: Kernel.IKernelConnection, msg: KernelMessage.IIOPubMessage): void {
    // only a cell's end: our own comm_open also goes busy -> idle, and would retry forever
    if (
      this._comm === null &&
      msg.header.msg_type === 'status' &&
      (msg.parent_header as any)?.msg_type === 'execute_request' &&
      (msg.content as any).execution_state === 'idle'
    ) {
      this._schedule();
    }
  }

  private _schedule(): void {
    if (this._timer !== null || this._disposed) {
      return;
    }
    const wait = Math.max(0, this._lastAttempt + CELLS_RETRY_INTERVAL - Date.now());
    this._timer = window.setTimeout(() => {
      this._timer = null;
      this._retry = false;
      if (this._comm === null) {
        this._connect();
      }
    }, wait);
  }

  private _close(): void {
    if (this._timer !== null) {
      window.clearTimeout(this._timer);
      this._timer = null;
    }
    const comm = this._comm;
    this._comm = null;
    if (comm && !comm.isDisposed) {
      try {
        comm.close();
      } catch {
        /* the kernel is gone */
      }
    }
  }

  private _comm: Kernel.IComm | null = null;
  private _kernel: Kernel.IKernelConnection | null = null;
  private _timer: number | null = null;
  private _retry = false;
  private _lastAttempt = 0;
  private _disposed = false;
}
