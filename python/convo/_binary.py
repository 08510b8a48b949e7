"""Finding the `convo` binary that came with this package."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig


def find_convo_bin() -> str:
    """The path of the `convo` executable.

    `CONVO_BIN` wins; then the scripts folder of the environment this
    package is installed in (where the wheel puts it), the user scheme's,
    and finally `convo` on `PATH`. Raises `FileNotFoundError` otherwise.
    """
    override = os.environ.get("CONVO_BIN")
    if override:
        return override
    exe = "convo" + (sysconfig.get_config_var("EXE") or "")
    candidates = [sysconfig.get_path("scripts")]
    user_scheme = _user_scheme()
    if user_scheme:
        candidates.append(sysconfig.get_path("scripts", scheme=user_scheme))
    # A venv's interpreter sits beside its scripts.
    candidates.append(os.path.dirname(sys.executable))
    for folder in candidates:
        path = os.path.join(folder, exe)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which("convo")
    if found:
        return found
    raise FileNotFoundError(
        "cannot find the `convo` binary: install the package with `pip install convo` "
        "(it ships the binary), or set CONVO_BIN"
    )


def _user_scheme() -> str | None:
    return sysconfig.get_preferred_scheme("user")
    if os.name == "nt":
        return "nt_user"
    return "posix_user"
