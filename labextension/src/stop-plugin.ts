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
import { PageConfig } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { CONTROL_TYPES, watchNotebook } from './stop';

/**
 * The kernel says busy, then idle, around each control message; the page would show the
 * kernel idle while the cell still waits. The page ignores the status of the message types
 * in the `untracked_message_types` option (jupyter_server's list: interrupt, debug, ...):
 * ours (Stop's and the sidebar chat's send) join them, and so do the subshell requests
 * JupyterLab itself sends on the control channel when a cell's first widget comm opens (comms
 * go over subshells by default in 4.6), which would show the kernel idle during a waiting
 * cell too.
 */
export function untrackStopMessages(): void {
  let types: unknown = [];
  try {
    types = JSON.parse(PageConfig.getOption('untracked_message_types') || '[]');
  } catch {
    types = [];
  }
  const list = Array.isArray(types) ? types.map(String) : [];
  for (const name of [...CONTROL_TYPES, 'create_subshell_request', 'delete_subshell_request']) {
    if (!list.includes(name)) {
      list.push(name);
    }
  }
  PageConfig.setOption('untracked_message_types', JSON.stringify(list));
}

export const stopPlugin: JupyterFrontEndPlugin<void> = {
  id: 'chaz-nb:stop',
  description: 'Delivers the Stop buttons of live chaz views over the kernel control channel, so they act while a cell waits.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    untrackStopMessages();
    const hook = (panel: NotebookPanel) => {
      const unwatch = watchNotebook(panel.node, () => panel.sessionContext.session?.kernel ?? null);
      panel.disposed.connect(unwatch);
    };
    tracker.forEach(hook);
    tracker.widgetAdded.connect((_, panel) => hook(panel));
  }
};
