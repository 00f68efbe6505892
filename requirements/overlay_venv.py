"""Make the running venv read every package it lacks from another venv.

Run with the interpreter of the overlay venv: ``.venv-min/bin/python requirements/overlay_venv.py .venv``.
It writes a ``.pth`` file that adds the base venv's site-packages *after* the overlay's own, so
the few pins installed in the overlay (an older tensordict) shadow the base's, and everything
else (torch, the backends) is shared instead of installed a second time. Then it checks that
tensordict is imported from the overlay.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import sys
import sysconfig


def main(base_venv: str) -> None:
    """Write the .pth file that appends ``base_venv``'s site-packages to this venv's path."""
    own = pathlib.Path(sysconfig.get_path("purelib"))
    base = pathlib.Path(base_venv).resolve() / own.relative_to(sys.prefix)
    if not base.is_dir():
        raise SystemExit(f"overlay_venv: base site-packages {base} does not exist")
    # addsitedir (not a bare path) so the base's own .pth files (editable installs) apply too
    (own / "tdrl-base-venv.pth").write_text(f"import site; site.addsitedir({str(base)!r})\n")


def check() -> None:
    """Fail unless tensordict is imported from this venv, not from the base."""
    import tensordict

    where = pathlib.Path(tensordict.__file__).resolve()
    if not where.is_relative_to(pathlib.Path(sys.prefix).resolve()):
        raise SystemExit(f"overlay_venv: tensordict imported from {where}, not from {sys.prefix}")
    print("overlay venv: tensordict", importlib.metadata.version("tensordict"), "from", sys.prefix)


if __name__ == "__main__":
    if sys.argv[1:] == ["--check"]:
        check()
    else:
        main(sys.argv[1])
