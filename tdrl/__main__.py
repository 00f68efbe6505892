"""``python -m tdrl``: the ``tdrl`` command."""

from __future__ import annotations

from tdrl.cli import main

raise SystemExit(main())
