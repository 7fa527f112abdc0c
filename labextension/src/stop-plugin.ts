/**
 * The plugin that delivers the Stop buttons of chaz's live views over the control channel
 * (./stop), in JupyterLab and Notebook 7 (both give it the notebook tracker).
 *
 * For each notebook it watches the outputs: when a chaz Stop button (class
 * `chaz-stop-session-N`) appears, it says hello to the notebook's kernel. Once the kernel has
 * answered, a click on such a button is taken before the widget sees it and sent as a
 * `chaz_stop_request` on the control channel, which the kernel reads even while the cell
 * waits. Before that (chaz_nb not loaded, an older chaz_nb) the click goes the widget's way.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { watchNotebook } from './stop';

export const stopPlugin: JupyterFrontEndPlugin<void> = {
  id: 'chaz-nb:stop',
  description: 'Delivers the Stop buttons of live chaz views over the kernel control channel, so they act while a cell waits.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const hook = (panel: NotebookPanel) => {
      const unwatch = watchNotebook(panel.node, () => panel.sessionContext.session?.kernel ?? null);
      panel.disposed.connect(unwatch);
    };
    tracker.forEach(hook);
    tracker.widgetAdded.connect((_, panel) => hook(panel));
  }
};
