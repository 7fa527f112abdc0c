/**
 * Saving chaz views so that they render without a kernel.
 *
 * JupyterLab prefers a widget view over the text/html fallback of the same
 * output, and a widget whose model is gone (the kernel was shut down) shows
 * "Error displaying widget: model not found" in the reopened notebook. The
 * kernel marks every chaz view output with `metadata.chaz_nb.static_fallback`:
 * its text/plain, text/html (and session JSON) stand alone. A finished view
 * already replaces its output by them; for a view that is still live when the
 * notebook is saved, the saved copy drops the widget view and keeps the static
 * forms. The live view on screen is not touched: only what `toJSON()` hands to
 * the save is rewritten, into new objects (the model's own are never mutated).
 */

export const WIDGET_MIME = 'application/vnd.jupyter.widget-view+json';

type JSONObject = { [key: string]: any };

/** A chaz view output that still holds a live widget view. */
export function isLiveChazView(output: unknown): boolean {
  if (!output || typeof output !== 'object') {
    return false;
  }
  const o = output as JSONObject;
  const data = o.data;
  const meta = o.metadata;
  return (
    !!data &&
    typeof data === 'object' &&
    WIDGET_MIME in data &&
    !!meta &&
    typeof meta === 'object' &&
    !!meta.chaz_nb &&
    meta.chaz_nb.static_fallback === true
  );
}

/** The notebook content with every live chaz view reduced to its static forms. */
export function withoutLiveViews<T>(content: T): T {
  const nb = content as unknown as JSONObject;
  if (!nb || typeof nb !== 'object' || !Array.isArray(nb.cells)) {
    return content;
  }
  let changed = false;
  const cells = nb.cells.map((cell: JSONObject) => {
    if (!cell || !Array.isArray(cell.outputs) || !cell.outputs.some(isLiveChazView)) {
      return cell;
    }
    changed = true;
    return {
      ...cell,
      outputs: cell.outputs.map((output: JSONObject) => {
        if (!isLiveChazView(output)) {
          return output;
        }
        const data = { ...output.data };
        delete data[WIDGET_MIME];
        return { ...output, data };
      })
    };
  });
  return (changed ? { ...nb, cells } : content) as T;
}

/** Make `model.toJSON()` (what a save writes) hold the static form of live chaz views. */
export function saveStaticViews(model: { toJSON(): unknown }): void {
  const m = model as { toJSON(): unknown; __chazStatic?: boolean };
  if (m.__chazStatic) {
    return;
  }
  const original = m.toJSON.bind(m);
  m.toJSON = () => withoutLiveViews(original());
  m.__chazStatic = true;
}
