"""Execute a notebook in a fresh kernel and print what each cell showed (text form).

Run: python examples/run_notebook.py notebooks/01_quickstart.ipynb [--save OUT.ipynb]
The notebook runs offline (the built-in chaz/echo and chaz/script models; no API key).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def text_of(output: dict) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    if output.get("output_type") == "error":
        return f"{output.get('ename')}: {output.get('evalue')}\n"
    data = output.get("data", {})
    return data.get("text/plain", "") + ("\n" if data.get("text/plain") else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("--save", help="write the executed notebook here")
    args = parser.parse_args()
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
    if args.save:
        nbformat.write(nb, args.save)
        print(f"\nexecuted notebook written to {args.save}")
    print(f"\n{'failed' if failed else 'done'} in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
