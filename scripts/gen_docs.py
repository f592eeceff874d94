"""Regenerate man/ and completions/ from the command line: `python scripts/gen_docs.py`."""

from __future__ import annotations

import sys
from pathlib import Path

from kafkactl.docs import completions, man_pages

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    for sub, files in (("man", man_pages()), ("completions", completions())):
        d = ROOT / sub
        d.mkdir(exist_ok=True)
        for old in d.iterdir():
            if old.name not in files:
                old.unlink()
        for name, text in files.items():
            (d / name).write_text(text)
        print(f"{sub}/: {len(files)} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
