"""`python -m convo ARGS`: runs the bundled `convo` binary."""

from __future__ import annotations

import os
import subprocess
import sys

from convo._binary import find_convo_bin


def main() -> None:
    path = find_convo_bin()
    if os.name == "posix":
        os.execv(path, [path, *sys.argv[1:]])
    sys.exit(subprocess.call([path, *sys.argv[1:]]))


if __name__ == "__main__":
    main()
