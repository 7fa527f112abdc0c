// jsdom lacks a few browser globals that @lumino/widgets touches at import time.
if (typeof globalThis.DragEvent === 'undefined') {
  globalThis.DragEvent = class DragEvent extends MouseEvent {};
}
