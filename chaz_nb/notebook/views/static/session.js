// The live view of a chaz session: one anywidget (chaz_nb/notebook/views/live.py).
// The kernel renders every row as escaped HTML; this draws them and sends clicks back.
// State (the model's attributes at open): head, earlier, rows, cards, tail, notice, stop, footer.
// Kernel -> here: a custom message with only what changed ({rows: {set: {i: html}, n}, cards:
// {id: card|null}, head, tail, ...}) or {reset: state}. Here -> kernel: {event: "stop" |
// "earlier" | "decide" | "approve_edited" | "shown", ...}. The Stop button carries the class
// chaz-stop-session-N: the chaz lab extension takes its click over the control channel
// (acts while a cell waits); without the extension the click goes by model.send.
const KEYS = ["head", "earlier", "rows", "cards", "tail", "notice", "stop", "footer"];

function apply(model, msg) {
  const st = msg.reset || msg;
  for (const key of KEYS) {
    if (!(key in st)) continue;
    let value = st[key];
    if (key === "rows" && !msg.reset) {
      const rows = (model.get("rows") || []).slice(0, value.n);
      for (const [i, h] of Object.entries(value.set)) rows[Number(i)] = h;
      value = rows;
    } else if (key === "cards" && !msg.reset) {
      const cards = Object.assign({}, model.get("cards") || {});
      for (const [id, card] of Object.entries(value)) {
        if (card === null) delete cards[id]; else cards[id] = card;
      }
      value = cards;
    }
    model.set(key, value); // local only: never saved back to the kernel
  }
}

function el(tag, cls, html) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (html !== undefined) node.innerHTML = html;
  return node;
}

function button(label, cls, tip) {
  const b = el("button", "jupyter-button widget-button chaz-btn " + cls);
  b.textContent = label;
  if (tip) b.title = tip;
  return b;
}

// The fields here keep their keys (issue 42 #1). JupyterLab and Notebook 7 match their shortcuts
// (Shift+Enter runs the cell, Escape, arrows) from a keydown listener on the document (bubbling
// in JupyterLab 4.6, capture in Notebook 7): a field marked data-lm-suppress-shortcuts is left
// out of that matching. JupyterLab's listener also cancels the line break of a keydown inside a
// .jp-Cell (meant for the cell's editor): stopping the keydown here keeps it from that listener.
// (labextension/src/keys.ts does the same for the sidebar's fields.)
function ownKeys(field) {
  field.setAttribute("data-lm-suppress-shortcuts", "true");
  field.addEventListener("keydown", (ev) => ev.stopPropagation());
  return field;
}

function drawCard(model, id, card, node) {
  // a card keeps its node (and what was typed in it) while the kernel updates it
  if (!node) {
    node = el("div", "chaz-approval-widget");
    node.head = el("div", "chaz-ap-head");
    const row = el("div", "chaz-ap-row");
    const send = (decision) => model.send({event: "decide", request_id: id, decision,
      reason: decision === "deny" ? node.reason.value : null});
    node.approve = button("✓ Approve", "mod-success chaz-ap-approve", "Run this call once");
    node.deny = button("✗ Deny", "mod-danger chaz-ap-deny", "Do not run it; the agent is told (with the reason)");
    node.reason = ownKeys(el("input", "chaz-ap-reason"));
    node.reason.placeholder = "reason (optional, sent with Deny)";
    node.all = button("✓✓ Approve all calls to this tool in this session", "chaz-ap-approve-all",
      "Approve this call and every later call to this tool in this session");
    node.edit = button("✎ Edit", "chaz-ap-edit");
    node.approve.onclick = () => send("approve");
    node.deny.onclick = () => send("deny");
    node.all.onclick = () => send("approve_all");
    const editRow = el("div", "chaz-ap-editor");
    editRow.style.display = "none";
    node.editor = ownKeys(el("textarea"));
    node.edited = button("✓ Approve edited", "mod-warning chaz-ap-approve-edited",
      "Run this call once, with the arguments as edited above (checked against the tool's schema)");
    node.edit.onclick = () => {
      const open = editRow.style.display === "none";
      if (open && !node.editor.value) node.editor.value = node.card.edit || "";
      editRow.style.display = open ? "" : "none";
    };
    node.edited.onclick = () => model.send({event: "approve_edited", request_id: id, text: node.editor.value});
    row.append(node.approve, node.deny, node.reason, node.all, node.edit);
    editRow.append(node.editor, node.edited);
    node.status = el("div", "chaz-ap-status");
    node.append(node.head, row, editRow, node.status);
  }
  if (node.card !== card) {
    node.card = card;
    node.head.innerHTML = card.html;
    node.edit.title = card.code ? "Edit the code before approving" : "Edit the arguments (JSON) before approving";
    node.editor.rows = Math.min(Math.max((card.edit || "").split("\n").length + 1, 4), 30);
    for (const b of [node.approve, node.deny, node.all, node.edit, node.edited, node.reason, node.editor]) {
      b.disabled = !!card.done;
    }
    node.status.innerHTML = card.status || "";
    if (card.egress) {  // may the notebook's data leave (server/egress_gate.py): nothing to edit
      node.approve.textContent = "✓ Allow once";
      node.approve.title = "Send this data to the model once";
      node.deny.title = "Keep it in the kernel: the model reads one line saying it was withheld";
      node.all.textContent = "✓✓ Allow for this session";
      node.all.title = "Send it, and the agent's later data to this host in this session";
      node.edit.style.display = "none";
    }
  }
  return node;
}

function render({model, el: root}) {
  root.classList.add("chaz-session-view", "chaz-s");
  const earlier = el("div", "chaz-earlier-row");
  const more = button("show earlier", "chaz-earlier-button", "load the previous page of entries");
  const earlierText = el("span", "chaz-earlier");
  more.onclick = () => { more.disabled = true; model.send({event: "earlier"}); };
  earlier.append(more, earlierText);
  const head = el("div", "chaz-transcript chaz-s");
  const body = el("div", "chaz-transcript chaz-s chaz-rows");
  const tail = el("div", "chaz-transcript chaz-s");
  const notice = el("div", "chaz-notice-row"); // a refused click, one line (escaped by the kernel)
  const stopRow = el("div", "chaz-stop-row");
  const stop = button("■ Stop", "mod-danger chaz-stop");
  const note = el("span", "chaz-stop-note");
  stop.onclick = () => { stop.disabled = true; model.send({event: "stop"}); };
  stopRow.append(stop, note);
  const footer = el("div", "chaz-transcript chaz-s");
  root.append(earlier, head, body, tail, notice, stopRow, footer);
  let shown = []; // the row nodes, in order
  const cardNodes = {};

  const draw = () => {
    const text = model.get("earlier") || "";
    earlier.style.display = text ? "" : "none";
    earlierText.innerHTML = text;
    more.disabled = false;
    head.innerHTML = model.get("head") || "";
    const rows = model.get("rows") || [];
    const cards = model.get("cards") || {};
    const after = {};
    for (const [id, card] of Object.entries(cards)) {
      cardNodes[id] = drawCard(model, id, card, cardNodes[id]);
      (after[card.row] = after[card.row] || []).push(cardNodes[id]);
    }
    for (const id of Object.keys(cardNodes)) if (!(id in cards)) { cardNodes[id].remove(); delete cardNodes[id]; }
    // rows whose HTML is unchanged keep their node (an unfolded tool row stays unfolded)
    const next = Array.from(rows, (h, i) => {
      h = h || "";
      const old = shown[i];
      if (old && old.html === h) return old;
      const node = el("div", "chaz-row", h);
      node.html = h;
      return node;
    });
    shown.forEach((node, i) => { if (next[i] !== node) node.remove(); });
    let prev = null;
    next.forEach((node, i) => {
      for (const item of [node, ...(after[i] || [])]) {
        if ((prev ? prev.nextSibling : body.firstChild) !== item) body.insertBefore(item, prev ? prev.nextSibling : body.firstChild);
        prev = item;
      }
    });
    shown = next;
    tail.innerHTML = model.get("tail") || "";
    tail.style.display = model.get("tail") ? "" : "none";
    notice.innerHTML = model.get("notice") || "";
    notice.style.display = model.get("notice") ? "" : "none";
    const s = model.get("stop");
    stopRow.style.display = s && s.shown ? "" : "none";
    if (s) {
      stop.className = "jupyter-button widget-button chaz-btn mod-danger chaz-stop chaz-stop-session-" + s.session;
      if (stop.dataset.chazStop !== "sent") stop.disabled = !!s.disabled;
      stop.title = s.tip || "";
      note.innerHTML = s.note || "";
    }
    footer.innerHTML = model.get("footer") || "";
    footer.style.display = model.get("footer") ? "" : "none";
  };
  draw();
  // Tell the kernel a page draws this widget: it then stops refreshing the output's static forms
  // while the widget is open, since JupyterLab draws a NEW view for each update of the output
  // (what was typed in a card's Edit or reason box would be lost).
  model.send({event: "shown"});
  // one draw for all the attributes a message changed
  let queued = false;
  const schedule = () => {
    if (!queued) { queued = true; queueMicrotask(() => { queued = false; draw(); }); }
  };
  for (const key of KEYS) model.on("change:" + key, schedule);
  return () => { for (const key of KEYS) model.off("change:" + key, schedule); };
}

export default {
  initialize({model}) {
    // the kernel's changes; anywidget holds comm messages until this module is loaded
    model.on("msg:custom", (msg) => apply(model, msg));
  },
  render,
};
