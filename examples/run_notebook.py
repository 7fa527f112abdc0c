"""Execute a notebook in a fresh kernel, print what each cell showed (text form), save the result.

Run: python examples/run_notebook.py notebooks/01_quickstart.ipynb [--save OUT.ipynb | --no-save]
The executed notebook goes beside the input as NAME.out.ipynb (``*.out.ipynb`` is in
.gitignore, and nbval skips it), so it can be opened in Jupyter with every output in place;
the input is left as it was. It is written even when a cell fails, to show where.
The notebook runs offline (the built-in chaz/echo and chaz/script models; no API key).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

OUT_SUFFIX = ".out.ipynb"


def default_output(notebook: str) -> str:
    """``notebooks/01_quickstart.ipynb`` -> ``notebooks/01_quickstart.out.ipynb``."""
    stem, ext = os.path.splitext(notebook)
    return (stem if ext == ".ipynb" else notebook) + OUT_SUFFIX


#: control characters but newline and tab: a terminal takes them as commands
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def text_of(output: dict) -> str:
    """What ``output`` shows, for the terminal: a model's or a tool's text is in it, so its
    escape sequences (OSC 52 sets the clipboard) are printed as text (``\\x1b``), not obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", _raw_text(output))


def _raw_text(output: dict) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    data = output.get("data", {})
    return data.get("text/plain", "") + ("\n" if data.get("text/plain") else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--save", metavar="OUT", help=f"write the executed notebook here (default: NAME{OUT_SUFFIX} beside it)"
    )
    where.add_argument("--no-save", action="store_true", help="do not write the executed notebook")
    args = parser.parse_args()
    out_path = None if args.no_save else (args.save or default_output(args.notebook))
    if out_path is not None and os.path.abspath(out_path) == os.path.abspath(args.notebook):
        parser.error("--save must not be the input notebook (it would be overwritten)")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    nb = nbformat.read(args.notebook, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": os.path.dirname(os.path.abspath(args.notebook))}})
    started = time.monotonic()
    print(f"running {args.notebook} …", flush=True)
    failed = False
    try:
        client.execute()
    except CellExecutionError as exc:
        failed = True
        print(f"a cell failed: {str(exc).strip().splitlines()[-1]}", file=sys.stderr)
    for i, cell in enumerate(nb.cells, 1):
        if cell.cell_type != "code":
            continue
        print(f"\n[{i}] " + cell.source.strip().splitlines()[0] if cell.source.strip() else f"\n[{i}]")
        for output in cell.get("outputs", []):
            text = text_of(output)
            if text.strip():
                print("    " + text.rstrip("\n").replace("\n", "\n    "))
    print(f"\n{'failed' if failed else 'done'} in {time.monotonic() - started:.1f} s")
    if out_path is None:
        print("executed notebook not written (--no-save)")
    else:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        nbformat.write(nb, out_path)
        print(f"executed notebook written to {out_path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
