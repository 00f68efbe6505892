import subprocess
import sys

import tdrl


def test_version_is_exposed():
    assert isinstance(tdrl.__version__, str) and tdrl.__version__.count(".") == 2


def test_import_tdrl_does_not_import_optional_backends():
    code = (
        "import sys, tdrl, tdrl.data, tdrl.envs; "
        "bad = [m for m in ('gymnasium', 'gym', 'mujoco', 'h5py', 'pygame') if m in sys.modules]; "
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"import tdrl pulled in optional backends: {out.stdout}"
