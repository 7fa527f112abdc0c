/**
 * Unit tests of the save hook: live chaz views are saved as their static form.
 */
import { isLiveChazView, saveStaticViews, WIDGET_MIME, withoutLiveViews } from '../src/save';

const MARK = { chaz_nb: { static_fallback: true } };

function live(): any {
  return {
    output_type: 'display_data',
    data: {
      'text/plain': 'tool calls · all sessions',
      'text/html': '<div>table</div>',
      [WIDGET_MIME]: { version_major: 2, version_minor: 0, model_id: 'abc' }
    },
    metadata: MARK
  };
}

function notebook(outputs: any[]): any {
  return { cells: [{ cell_type: 'code', source: '%chaz audit', outputs }], metadata: {}, nbformat: 4, nbformat_minor: 5 };
}

describe('saving live chaz views', () => {
  it('drops the widget view of a marked output and keeps its static forms', () => {
    const nb = notebook([live()]);
    const saved = withoutLiveViews(nb);
    const out = saved.cells[0].outputs[0];
    expect(Object.keys(out.data).sort()).toEqual(['text/html', 'text/plain']);
    expect(out.metadata).toEqual(MARK);
    // the model's own objects are not touched: the live view stays on screen
    expect(WIDGET_MIME in nb.cells[0].outputs[0].data).toBe(true);
  });

  it('leaves other widgets and finished views alone', () => {
    const other = { ...live(), metadata: {} };
    const finished = { ...live(), data: { 'text/plain': 'x' } };
    const nb = notebook([other, finished]);
    expect(withoutLiveViews(nb)).toBe(nb);
    expect(isLiveChazView(other)).toBe(false);
    expect(isLiveChazView(finished)).toBe(false);
    expect(withoutLiveViews('not a notebook')).toBe('not a notebook');
  });

  it('rewrites what the model hands to a save', () => {
    const nb = notebook([live()]);
    const model = { toJSON: () => nb };
    saveStaticViews(model);
    saveStaticViews(model); // once only
    const saved = model.toJSON() as any;
    expect(WIDGET_MIME in saved.cells[0].outputs[0].data).toBe(false);
  });
});
