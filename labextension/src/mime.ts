/**
 * MIME renderer extension for `application/vnd.chaz.session+json`.
 *
 * A pure renderer of the bundle: it needs no kernel, so a saved notebook
 * reopened later still shows its transcripts. It never injects HTML, so it is
 * declared safe and also renders in untrusted notebooks.
 */
import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { renderTranscript } from './transcript';
import { SESSION_MIME } from './types';

export class SessionRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass('chaz-session-output');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[this._mimeType];
    this.node.replaceChildren(renderTranscript(data, this.node.ownerDocument));
    return Promise.resolve();
  }

  private _mimeType: string;
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
