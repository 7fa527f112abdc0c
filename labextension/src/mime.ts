/**
 * MIME renderer extension for `application/vnd.chaz.session+json`.
 *
 * A pure renderer of the bundle: it needs no kernel, so a saved notebook
 * reopened later still shows its transcripts. It never injects HTML, so it is
 * declared safe and also renders in untrusted notebooks.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { earlierLoader } from './pager';
import { isSessionBundle, renderTranscript } from './transcript';
import { IPage, ISessionBundle, SESSION_MIME } from './types';

export class SessionRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass('chaz-session-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[this._mimeType];
    const bundle = isSessionBundle(data) ? (data as ISessionBundle) : null;
    // pages loaded by "show earlier" stay when the kernel updates the output (a live view),
    // as long as the output still starts where they end
    if (!bundle || this._loaded === null || this._loadedBefore !== bundle.first_seq) {
      this._loaded = null;
    }
    this.node.replaceChildren(
      renderTranscript(data, this.node.ownerDocument, {
        loadEarlier: earlierLoader(),
        loaded: this._loaded,
        onLoaded: shown => {
          const before = bundle?.first_seq;
          if (typeof before !== 'number') {
            return;
          }
          this._loadedBefore = before;
          this._loaded = {
            entries: shown.entries.filter(e => e.seq < before),
            first_seq: shown.first_seq ?? null,
            earlier: typeof shown.earlier === 'number' ? shown.earlier : 0
          };
        }
      })
    );
    return Promise.resolve();
  }

  private _mimeType: string;
  private _loaded: IPage | null = null;
  private _loadedBefore: number | null | undefined = undefined;
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [SESSION_MIME],
  // Rank below text/html (50) so the transcript wins over the HTML fallback.
  defaultRank: 10,
  createRenderer: options => new SessionRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'chaz-nb:session-renderer',
  description: 'Renders chaz session transcripts.',
  rendererFactory,
  rank: 10,
  dataType: 'json'
};

export default extension;
