/**
 * Code a tool gets (`kernel__run`, or any call whose one argument is `code`) shown as code,
 * and the controls around it: Copy, and "Insert as cell below" (through an inserter the
 * notebook plugin registers, see ./index; without one the control is not drawn).
 *
 * Pure DOM, no JupyterLab imports (unit tested in jsdom). The code goes into the DOM through
 * textContent only, and each character that reorders or hides text is shown by name
 * (`<U+202E>`), as the approval card names them. Copy and Insert take the code as the tool got
 * it (JupyterLab's editor marks such characters itself).
 */

/** Inserts code as a new cell below the cell whose output holds `anchor`. */
export type CellInserter = (code: string, anchor: HTMLElement) => boolean;

let inserter: CellInserter | null = null;

export function setCellInserter(value: CellInserter | null): void {
  inserter = value;
}

export function cellInserter(): CellInserter | null {
  return inserter;
}

/** Lines of code drawn (the log has all of them). */
export const MAX_CODE_LINES = 400;

const HIDDEN = /[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g;

/** `text` with each bidi control / zero-width character named: `<U+202E>`. */
export function nameHidden(text: string): string {
  return text.replace(HIDDEN, c => `<U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}>`);
}

// C0 and C1 control characters but tab, newline and carriage return (ESC starts an ANSI escape)
const CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f]/g;

/** `text` with each control, bidi and zero-width character named: `<U+001B>[31m`, `<U+202E>`. */
export function visible(text: string): string {
  return nameHidden(
    text.replace(CONTROL, c => `<U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}>`)
  );
}

/** The code of a call whose arguments are exactly `{code: TEXT}`; else null. */
export function codeOf(args: unknown): string | null {
  if (!args || typeof args !== 'object' || Array.isArray(args)) {
    return null;
  }
  const keys = Object.keys(args as object);
  const code = (args as { [k: string]: unknown }).code;
  return keys.length === 1 && keys[0] === 'code' && typeof code === 'string' ? code : null;
}

function make<K extends keyof HTMLElementTagNameMap>(
  doc: Document,
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = doc.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** Characters of one line drawn on one row; the rest goes on rows numbered `↪`. */
export const WRAP_CHARS = 160;
const BLANK = '[ \\t\\u00a0\\u2000-\\u200a\\u3000]';
const INNER_BLANKS = new RegExp(`(?<=\\S)${BLANK}{16,}`, 'g');
const LEAD_BLANKS = new RegExp(`^${BLANK}{64,}`);

function blanks(run: string): string {
  return `⟨${run.length.toLocaleString('en-US')} blanks⟩`;
}

/**
 * The rows a code block draws, [number, text], as the kernel's cards draw them
 * (chaz_nb/notebook/views/code.py): nothing that runs is out of sight. A long run of blanks
 * inside a line is `⟨3,000 blanks⟩`, and a line longer than WRAP_CHARS goes on rows `↪`.
 */
export function codeRows(code: string, maxLines = MAX_CODE_LINES): [string, string][] {
  const rows: [string, string][] = [];
  visible(code)
    .split('\n')
    .slice(0, maxLines)
    .forEach((raw, i) => {
      const line = raw.replace(INNER_BLANKS, blanks).replace(LEAD_BLANKS, blanks);
      rows.push([String(i + 1), line.slice(0, WRAP_CHARS)]);
      for (let at = WRAP_CHARS; at < line.length; at += WRAP_CHARS) {
        rows.push(['↪', line.slice(at, at + WRAP_CHARS)]);
      }
    });
  return rows;
}

/**
 * What a card says about a code call's code (the request's `code_check`, as the kernel's card:
 * approval.py `code_notes`): `refused` when Approve cannot run it as shown, then the notes.
 */
export function codeNotes(check: unknown): { refused: string | null; notes: string[] } {
  const c = check && typeof check === 'object' ? (check as { [k: string]: unknown }) : {};
  const refused =
    typeof c.problem === 'string' && c.problem ? `⛔ Approve is refused: ${visible(c.problem)}` : null;
  const notes: string[] = [];
  const masked = c.masked_literals;
  if (typeof masked === 'number' && Number.isSafeInteger(masked) && masked > 0) {
    notes.push(
      `${masked} secret literal${masked !== 1 ? 's' : ''} shown as «REDACTED»: each stands for ` +
        'that one literal, and the code runs with its real value'
    );
  }
  if (typeof c.sha256 === 'string' && /^[0-9a-f]{16,64}$/.test(c.sha256)) {
    notes.push(`sha256 ${c.sha256.slice(0, 16)}… (the log keeps it with the code that runs)`);
  }
  return { refused, notes };
}

/** A numbered code block (hidden characters named, long lines marked). */
export function renderCode(doc: Document, code: string, maxLines = MAX_CODE_LINES): HTMLElement {
  const pre = make(doc, 'pre', 'chaz-code');
  const lines = code.split('\n');
  for (const [n, text] of codeRows(code, maxLines)) {
    const row = make(doc, 'span', 'chaz-code-line');
    row.appendChild(make(doc, 'span', 'chaz-code-no', n));
    row.appendChild(doc.createTextNode(text));
    pre.appendChild(row);
  }
  if (lines.length > maxLines) {
    pre.appendChild(
      make(doc, 'span', 'chaz-code-line chaz-code-more', `… ${lines.length - maxLines} more lines (%chaz log has them)`)
    );
  }
  return pre;
}

async function copyText(doc: Document, text: string): Promise<boolean> {
  const nav = doc.defaultView?.navigator;
  if (nav?.clipboard?.writeText) {
    try {
      await nav.clipboard.writeText(text);
      return true;
    } catch {
      /* not allowed (no focus, insecure origin): the textarea way below */
    }
  }
  const area = doc.createElement('textarea');
  area.value = text;
  area.style.position = 'fixed';
  area.style.opacity = '0';
  doc.body.appendChild(area);
  area.select();
  let ok = false;
  try {
    ok = typeof doc.execCommand === 'function' && doc.execCommand('copy');
  } catch {
    ok = false;
  }
  area.remove();
  return ok;
}

/** The code block with its Copy and "Insert as cell below" controls. */
export function renderCodeBlock(doc: Document, code: string): HTMLElement {
  const box = make(doc, 'div', 'chaz-code-block');
  const bar = make(doc, 'div', 'chaz-code-bar');
  const copy = make(doc, 'button', 'chaz-code-copy', 'Copy');
  copy.type = 'button';
  copy.title = 'Copy the code';
  copy.addEventListener('click', () => {
    void copyText(doc, code).then(ok => {
      copy.textContent = ok ? 'Copied' : 'Copy failed';
    });
  });
  bar.appendChild(copy);
  const insert = cellInserter();
  if (insert) {
    const button = make(doc, 'button', 'chaz-code-insert', 'Insert as cell below');
    button.type = 'button';
    button.title = 'Put this code in a new cell below this output (not run)';
    button.addEventListener('click', () => {
      const ok = insert(code, box);
      button.textContent = ok ? 'Inserted below' : 'No notebook to insert into';
    });
    bar.appendChild(button);
  }
  box.appendChild(bar);
  box.appendChild(renderCode(doc, code));
  return box;
}

/** A Message's attachments (`payload.attachments`: `[{name, type?, shape?}]`) as chips. */
export function renderChips(doc: Document, attachments: unknown): HTMLElement | null {
  if (!Array.isArray(attachments)) {
    return null;
  }
  const row = make(doc, 'div', 'chaz-chips');
  for (const a of attachments) {
    if (!a || typeof a !== 'object' || (a as { name?: unknown }).name === undefined || (a as { name?: unknown }).name === null) {
      continue;
    }
    const item = a as { [k: string]: unknown };
    const chip = make(doc, 'span', 'chaz-chip', `📎 ${visible(String(item.name))}`);
    const detail = ['type', 'shape']
      .map(k => item[k])
      .filter(v => v !== undefined && v !== null && v !== '')
      .map(v => (typeof v === 'string' ? v : JSON.stringify(v)))
      .join(' ');
    if (detail) {
      chip.title = visible(detail);
    }
    row.appendChild(chip);
  }
  return row.childElementCount ? row : null;
}
