"""The ina backend's C++ half (ina_c10d.cpp, beside this module), built with torch's
own headers the first time it is needed and kept, per torch version and source, in
the user's cache
(``$XDG_CACHE_HOME/ina``, default ``~/.cache/ina``): ``BackendCore``, the base of
``ina.torch.backend.ProcessGroupIna``, so that its Works are torch's own (their
``is_completed()`` turns True, a ``recv``'s source is known); ``FutureWork``, a Work done
when a future is; ``set_error``, a future's error. ``make setup`` builds it ahead (``load()``).

Building needs a C++ compiler, Python's headers and ninja: on Debian ``apt-get install
g++ python3-dev`` and ``pip install ninja`` (``make setup`` installs all three); without
them, ``import ina.torch`` fails saying which is missing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import sysconfig
from pathlib import Path
from types import ModuleType

from ina.errors import UsageError

LOG = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("ina_c10d.cpp")
_LOADED: ModuleType | None = None


def cache_dir() -> Path:
    """Where the build for this torch and this source lives."""
    import torch

    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ina"
    return base / f"c10d-torch{torch.__version__}-{digest}"


def missing_tools() -> list[str]:
    """What the build needs and this machine lacks, with how to get it."""
    missing = []
    if shutil.which(os.environ.get("CXX", "c++")) is None:
        missing.append("a C++ compiler (apt-get install g++)")
    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").exists():
        missing.append(f"Python's headers, {include}/Python.h (apt-get install python3-dev)")
    if importlib.util.find_spec("ninja") is None and shutil.which("ninja") is None:
        missing.append("ninja (pip install ninja)")
    return missing


def load() -> ModuleType:
    """The C++ half, built first if this torch and source have no build yet."""
    global _LOADED
    if _LOADED is not None:
        return _LOADED
    from torch.utils import cpp_extension

    directory = cache_dir()
    if not any(directory.glob("*.so")):
        problems = missing_tools()
        if problems:
            raise UsageError("the ina backend's C++ half cannot be built here: it needs "
                             + "; ".join(problems))
        LOG.warning("building the ina backend's C++ half in %s (once per torch version: "
                    "a minute or two)", directory)
    directory.mkdir(parents=True, exist_ok=True)
    _ninja_on_path()
    _LOADED = cpp_extension.load(name="ina_c10d", sources=[str(SOURCE)],
                                 build_directory=str(directory), extra_cflags=["-O2"],
                                 verbose=False)
    return _LOADED


def _ninja_on_path() -> None:
    """torch runs ``ninja``: the one PyPI's package installed, if PATH lacks it (a venv's
    python run without the venv activated)."""
    if shutil.which("ninja") is not None or importlib.util.find_spec("ninja") is None:
        return
    import ninja

    os.environ["PATH"] = os.pathsep.join([str(ninja.BIN_DIR), os.environ.get("PATH", "")])
