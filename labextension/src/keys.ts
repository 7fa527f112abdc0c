/**
 * Text fields that keep their keys from the notebook's shortcuts (issue 42 §1).
 *
 * JupyterLab and Notebook 7 match their keyboard shortcuts (Shift+Enter runs the cell, Escape,
 * arrows, C / V / X on cells) from a keydown listener on the document: JupyterLab 4.6 listens
 * in the bubbling phase, Notebook 7 in the capture phase. A field marked
 * `data-lm-suppress-shortcuts` is left out of that matching in both. JupyterLab's listener also
 * cancels the `insertLineBreak` input of a keydown inside any `.jp-Cell` (meant for the cell's
 * editor): in a field of an output, Enter then adds no line. Stopping the keydown at the field
 * keeps it from that listener (and from the panels around the field).
 */
export function ownKeys<T extends HTMLElement>(field: T): T {
  field.setAttribute('data-lm-suppress-shortcuts', 'true');
  field.addEventListener('keydown', ev => ev.stopPropagation());
  return field;
}
