/**
 * Unit tests of approved agent code as cells: the `cell` message is checked, and the cell goes
 * below the cell that asked (after the agent's earlier cells for it), else at the end, once.
 */
import { agentCell, insertAgentCell, ICellsNotebook } from '../src/cells';

function message(toolCall: string, cellId: string | null, extra: any = {}): any {
  return {
    type: 'cell',
    session_id: 3,
    cell_id: cellId,
    source: `# chaz: written by @coder (chaz/script), approved by you — session 3, call ${toolCall}\ntop = 1`,
    outputs: [
      { output_type: 'stream', name: 'stdout', text: 'top is 1\n' },
      { output_type: 'execute_result', execution_count: 4, data: { 'text/plain': '1' }, metadata: {} },
      { output_type: 'bogus' }
    ],
    metadata: {
      chaz: { session: 3, tool_call: toolCall, agent: 'coder', model: 'chaz/script', approved_by: 'user',
        edited: false, code_sha256: 'ab' }
    },
    ...extra
  };
}

function notebook(ids: string[]): ICellsNotebook & { inserted: any[]; cells: any[] } {
  const cells: any[] = ids.map(id => ({ id, meta: {}, getMetadata: (k: string) => undefined }));
  const nb: any = {
    cells,
    inserted: [],
    insertCell(index: number, cell: any) {
      const meta = cell.metadata;
      cells.splice(index, 0, { id: `new-${nb.inserted.length}`, getMetadata: (k: string) => meta[k] });
      nb.inserted.push({ index, cell });
    }
  };
  return nb;
}

describe('agentCell', () => {
  it('keeps the known outputs, never runs them again (no execution count)', () => {
    const cell = agentCell(message('c1', 'a'))!;
    expect(cell.cellId).toBe('a');
    expect(cell.outputs.map(o => o.output_type)).toEqual(['stream', 'execute_result']);
    expect(cell.outputs[1].execution_count).toBeNull();
    expect(cell.chaz.tool_call).toBe('c1');
  });

  it('refuses a message that is no cell', () => {
    expect(agentCell({ type: 'state' })).toBeNull();
    expect(agentCell(message('c1', 'a', { metadata: {} }))).toBeNull();
    expect(agentCell(message('c1', 'a', { source: 3 }))).toBeNull();
  });
});

describe('insertAgentCell', () => {
  it('goes below the cell that asked, after that session\'s earlier cells, with its metadata', () => {
    const nb = notebook(['x', 'a', 'y']);
    expect(insertAgentCell(nb, agentCell(message('c1', 'a'))!)).toBe(2);
    expect(insertAgentCell(nb, agentCell(message('c2', 'a'))!)).toBe(3);
    expect(nb.cells.map(c => c.id)).toEqual(['x', 'a', 'new-0', 'new-1', 'y']);
    const inserted = nb.inserted[0].cell;
    expect(inserted.cell_type).toBe('code');
    expect(inserted.execution_count).toBeNull();
    expect(inserted.metadata.chaz.agent).toBe('coder');
  });

  it('goes at the end for the sidebar chat or a cell no longer there, and only once', () => {
    const nb = notebook(['x', 'y']);
    expect(insertAgentCell(nb, agentCell(message('c1', null))!)).toBe(2);
    expect(insertAgentCell(nb, agentCell(message('c2', 'gone'))!)).toBe(3);
    expect(insertAgentCell(nb, agentCell(message('c1', null))!)).toBe(2);
    expect(nb.inserted.length).toBe(2);
  });
});
