/**
 * Where the transcript renderer gets earlier pages from.
 *
 * The MIME renderer (./mime) has no kernel of its own; the sidebar plugin (./index) follows the
 * active notebook's kernel through its `ChazClient` and registers that client's `page` here, so
 * a transcript's "show earlier" asks the kernel for the previous page over the `chaz` comm.
 * Without a loader (no kernel, a kernel-less viewer) the control says which command shows them.
 */
import { EarlierLoader } from './types';

let loader: EarlierLoader | null = null;

export function setEarlierLoader(value: EarlierLoader | null): void {
  loader = value;
}

export function earlierLoader(): EarlierLoader | null {
  return loader;
}
