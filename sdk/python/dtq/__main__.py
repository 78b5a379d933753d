"""``python3 -m dtq serve MODULE...``: imports the modules (a dotted name, or a path to a
``.py`` file), whose ``@dtq.task`` functions register themselves, then serves them on
descriptors 3 and 4 until descriptor 3 ends.

Exit status: 0 at the end of descriptor 3 with every task answered; 70 on a protocol
error (a line on stderr); 1 when a module cannot be imported; 2 for a bad command line.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import traceback

from .serve import serve


def _load(name: str) -> None:
    if name.endswith(".py") or os.sep in name:
        path = os.path.abspath(name)
        modname = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(modname, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        sys.path.insert(0, os.path.dirname(path))
        spec.loader.exec_module(module)
    else:
        importlib.import_module(name)


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python3 -m dtq",
        description="Serve dtq task types under a [pool:NAME] section of dtq-worker "
        "(the pool protocol, version 1, on descriptors 3 and 4).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="import MODULE... and serve their @dtq.task handlers")
    p.add_argument("modules", nargs="+", metavar="MODULE", help="a module name or a .py path")
    args = parser.parse_args(argv)
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in args.modules:
        try:
            _load(name)
        except BaseException:
            sys.stderr.write(f"dtq: cannot import {name}:\n{traceback.format_exc()}")
            return 1
    serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
