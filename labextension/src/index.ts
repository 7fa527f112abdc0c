/**
 * chaz-nb JupyterLab extension: the "Chaz" sidebar and its palette commands.
 * (The transcript MIME renderer is the separate mimeExtension in ./mime.)
 */
import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions, NotebookPanel } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';

import { CellsLink } from './cells';
import { ChazClient } from './client';
import { setCellInserter } from './code';
import { setEarlierLoader } from './pager';
import { saveStaticViews } from './save';
import { ChazPanel } from './sidebar';
import { stopPlugin } from './stop-plugin';

export { ChazClient } from './client';
export { agentCell, CellsLink, insertAgentCell } from './cells';
export { ChazPanel, editText, oldestPending } from './sidebar';
export { ChatView, isSendKey, parseMessage, visible } from './chat';
export * from './code';
export { isLiveChazView, saveStaticViews, withoutLiveViews } from './save';
export { earlierLoader, setEarlierLoader } from './pager';
export * from './transcript';
export * from './types';
export { StopChannel, stopButtonOf, stopChannel } from './stop';

export const CommandIDs = {
  showSessions: 'chaz:show-sessions',
  approveOldest: 'chaz:approve-oldest'
};

const ICON_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <path class="jp-icon3" fill="#616161" d="M4 3h16a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H9l-5 4v-4H4a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2zm3 6a1.5 1.5 0 1 0 0 3 1.5 1.5 0 0 0 0-3zm5 0a1.5 1.5 0 1 0 0 3 1.5 1.5 0 0 0 0-3zm5 0a1.5 1.5 0 1 0 0 3 1.5 1.5 0 0 0 0-3z"/>
</svg>`;

export const chazIcon = new LabIcon({ name: 'chaz-nb:chaz', svgstr: ICON_SVG });

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'chaz-nb:sidebar',
  description: 'Chaz sidebar: sessions and pending approvals of the active notebook kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  optional: [ICommandPalette, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null
  ) => {
    const client = new ChazClient();
    // a transcript's "show earlier" asks the active notebook's kernel (./pager)
    setEarlierLoader((sessionId, beforeSeq) => client.page(sessionId, beforeSeq));
    // a transcript's "Insert as cell below" (./code): below the cell whose output holds it
    setCellInserter((code, anchor) => insertBelow(tracker, code, anchor));
    const panel = new ChazPanel(client);
    panel.title.icon = chazIcon;
    app.shell.add(panel, 'left', { rank: 650 });
    if (restorer) {
      restorer.add(panel, 'chaz-sidebar');
    }

    const follow = (nb: NotebookPanel | null) => {
      panel.followPath(nb ? nb.context : null); // the Notebook: line follows a rename
      client.follow(nb ? nb.sessionContext : null);
    };
    tracker.currentChanged.connect((_, nb) => follow(nb));
    follow(tracker.currentWidget);

    app.commands.addCommand(CommandIDs.showSessions, {
      label: 'Chaz: show sessions',
      caption: 'Open the Chaz sidebar (sessions and pending approvals)',
      execute: () => {
        app.shell.activateById(panel.id);
        client.refresh();
      }
    });
    app.commands.addCommand(CommandIDs.approveOldest, {
      label: 'Chaz: approve oldest pending',
      caption: 'Approve the oldest pending tool call of the active notebook kernel',
      execute: () => {
        if (!panel.approveOldest()) {
          Notification.info('Chaz: no pending approval to approve.', {
            autoClose: 3000
          });
        }
      }
    });
    if (palette) {
      palette.addItem({ command: CommandIDs.showSessions, category: 'Chaz' });
      palette.addItem({ command: CommandIDs.approveOldest, category: 'Chaz' });
    }
  }
};

/**
 * Put `code` in a new code cell below the cell whose output holds `anchor` (else below the
 * active cell of the current notebook); the cell is not run. False when there is no notebook.
 */
function insertBelow(tracker: INotebookTracker, code: string, anchor: HTMLElement): boolean {
  let target: NotebookPanel | null = null;
  let index = -1;
  tracker.forEach(nb => {
    if (target === null) {
      const i = nb.content.widgets.findIndex(cell => cell.node.contains(anchor));
      if (i >= 0) {
        target = nb;
        index = i;
      }
    }
  });
  const panel: NotebookPanel | null = target ?? tracker.currentWidget;
  if (!panel) {
    return false;
  }
  const notebook = panel.content;
  if (index >= 0) {
    notebook.activeCellIndex = index;
  }
  NotebookActions.insertBelow(notebook);
  NotebookActions.changeCellType(notebook, 'code');
  const cell = notebook.activeCell;
  if (!cell) {
    return false;
  }
  cell.model.sharedModel.setSource(code);
  return true;
}

/** Saved notebooks hold the static form of live chaz views (see ./save). */
const savePlugin: JupyterFrontEndPlugin<void> = {
  id: 'chaz-nb:save-static-views',
  description: 'Saves live chaz views as their static form, so a reopened notebook renders them without a kernel.',
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const hook = (panel: NotebookPanel) => {
      const model = panel.context.model;
      if (model) {
        saveStaticViews(model);
      }
    };
    tracker.forEach(hook);
    tracker.widgetAdded.connect((_, panel) => hook(panel));
  }
};

/**
 * Approved agent code lands in the notebook as cells (./cells): each notebook opens a `cells`
 * comm to its kernel; a person's approved `kernel__run` is inserted below the cell that asked.
 */
const cellsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'chaz-nb:agent-cells',
  description: "Inserts an agent's approved kernel__run code as a cell below the cell that asked, with its outputs.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (_app: JupyterFrontEnd, tracker: INotebookTracker) => {
    const hook = (panel: NotebookPanel) => {
      const link = new CellsLink(panel.sessionContext, () => panel.content.model?.sharedModel ?? null);
      panel.disposed.connect(() => link.dispose());
    };
    tracker.forEach(hook);
    tracker.widgetAdded.connect((_, panel) => hook(panel));
  }
};

export default [plugin, savePlugin, stopPlugin, cellsPlugin];
