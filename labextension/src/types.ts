/**
 * Data contracts shared with the Python side (chaz_nb).
 *
 * Every string in these structures is authored by an agent, a tool or a user:
 * it is only ever put into the DOM through textContent, never as HTML.
 */

/** MIME type of a session transcript bundle. */
export const SESSION_MIME = 'application/vnd.chaz.session+json';

/** Kernel comm target name of the sidebar channel. */
export const COMM_TARGET = 'chaz';

export type EntryType =
  | 'Message'
  | 'Directive'
  | 'ToolCall'
  | 'ToolResult'
  | 'Ack'
  | 'Error'
  | 'Summary'
  | 'ApprovalRequest'
  | 'ApprovalDecision';

export type SessionStatus = 'idle' | 'running' | 'parked';

export interface IEntry {
  id: number;
  seq: number;
  type: EntryType | string;
  sender: string;
  content: string;
  tool_call_id?: string | null;
  tool_name?: string | null;
  payload?: { [key: string]: any } | null;
  created_at?: string | null;
}

export interface ISessionInfo {
  id: number;
  agent: string;
  kind: string;
  parent_id?: number | null;
  depth?: number;
  /** a fork's source session and the seq it was forked at */
  forked_from?: number | null;
  forked_at_seq?: number | null;
}

/** Value of the `application/vnd.chaz.session+json` bundle. */
export interface ISessionBundle {
  version: number;
  session: ISessionInfo;
  status?: SessionStatus | string;
  entries: IEntry[];
  /** a last line, e.g. `full log: %chaz log 3` under one turn's view */
  footer?: string;
  /** `cell`: the entries are one cell's part of a run (the count says "in this cell") */
  scope?: string;
  /** the header's count as the kernel made it: of the rows shown and the entries they fold */
  count_label?: string;
  /** what the view shows, e.g. `room ops` */
  title?: string;
  /** the reply a run is writing now (streamed; not an entry): replaced by its Message */
  stream?: IStreamPartial;
  /** the seq of the first entry shown (a view shows the newest page of a long session) */
  first_seq?: number | null;
  /** how many entries come before `first_seq` (the "show earlier" count) */
  earlier?: number;
  /** the command line that shows them, e.g. `%chaz log 3 --before 71` */
  earlier_command?: string;
  /** a turn's view starts after this seq: "show earlier" loads nothing before it */
  after_seq?: number;
}

/** The previous page of a session (the kernel's answer to a `page` comm message). */
export interface IPage {
  entries: IEntry[];
  first_seq: number | null;
  earlier: number;
}

/** Loads the entries of a session before a seq; null when no kernel can answer. */
export type EarlierLoader = (sessionId: number, beforeSeq: number) => Promise<IPage | null>;

/** The text so far of a streamed reply (``stream`` of a session bundle). */
export interface IStreamPartial {
  run_id: number;
  sender: string;
  text: string;
}

/** One session as listed by the kernel's `state` comm message. */
export interface ISessionSummary {
  id: number;
  agent: string;
  kind: string;
  status: SessionStatus | string;
  last_entry: {
    type: string;
    sender: string;
    content: string;
    created_at: string | null;
  } | null;
  /** the end of the reply a run is writing now (streamed; not an entry yet) */
  streaming?: string;
}

/** One pending approval as listed by the kernel's `state` comm message. */
export interface IPendingApproval {
  request_id: string;
  session_id: number;
  agent: string;
  tool_name: string;
  risk_level: string;
  arguments_display: any;
  created_at: string | null;
  /** `egress`: may the notebook's data leave for a host (server/egress_gate.py); else a tool call */
  kind?: string;
  /** a code call's check (as the cell's card): why Approve is refused, masked literals, sha256 */
  code_check?: { problem?: string; masked_literals?: number; sha256?: string };
}

export interface IStateMessage {
  type: 'state';
  sessions: ISessionSummary[];
  pending: IPendingApproval[];
  /** the agents this kernel defines (the "new chat with @NAME" control) */
  agents?: string[];
}

/**
 * The followed session of the sidebar's chat (kernel: notebook/labchat.py): a `reset` carries
 * the newest page as a session bundle, a delta the entries written since, the status and the
 * streamed reply; `ok` false is a refused `chat_open`.
 */
export interface IChatMessage {
  type: 'chat';
  ok: boolean;
  session_id: number | null;
  reset?: boolean;
  bundle?: ISessionBundle;
  entries?: IEntry[];
  status?: string;
  stream?: IStreamPartial | null;
  message?: string;
}

/** The kernel's answer to a `send` (the Message was written, or why not). */
export interface ISentMessage {
  type: 'sent';
  request_id: string;
  ok: boolean;
  session_id: number | null;
  message: string;
  /** (over control) the kernel is busy in a cell's own code: written when it is free, and
   * the `sent` then comes on the comm */
  queued?: boolean;
}

export interface IPageMessage extends IPage {
  type: 'page';
  request_id: string;
  ok: boolean;
  session_id?: number;
  message?: string;
}

export interface IDecidedMessage {
  type: 'decided';
  request_id: string;
  ok: boolean;
  message: string;
}

/** The kernel's answer to a `stop` request (what was stopped, or why nothing was). */
export interface IStoppedMessage {
  type: 'stopped';
  session_id: number;
  ok: boolean;
  message: string;
}

export type KernelToFrontend =
  | IStateMessage
  | IDecidedMessage
  | IStoppedMessage
  | IPageMessage
  | IChatMessage
  | ISentMessage;

export type FrontendToKernel =
  | { type: 'refresh' }
  | {
      type: 'page';
      request_id: string;
      session_id: number;
      before_seq: number;
      limit: number;
    }
  | {
      type: 'decide';
      request_id: string;
      decision: 'approve' | 'deny' | 'approve_all';
      reason: string | null;
      /** approve with edits: the edited arguments (checked against the tool's schema) */
      arguments?: { [key: string]: unknown } | string;
    }
  | { type: 'stop'; session_id: number }
  | { type: 'chat_open'; session_id: number }
  | { type: 'chat_close' }
  | {
      type: 'send';
      request_id: string;
      text: string;
      /** the open chat's session (none in a new chat) */
      session_id?: number;
      /** the box's `@NAME` */
      agent?: string;
      /** a new session of `agent` (the "new chat" control) */
      new?: boolean;
    };
