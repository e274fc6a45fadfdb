"""An optional compiled build of the replay engine: the same sources, compiled by mypyc.

The simulator is plain typed Python. mypyc (part of mypy) compiles the modules of
:data:`MODULES` to C extensions from those very sources, with no second code path:
the compiled engine makes the same schedule as the Python one, only faster (about
twice on the deep-queue benchmark, ``benchmarks/sim_speed.py``), and the Python modules
stay the reference (``tests/unit/test_sim_native.py`` replays both and compares).

Build it once per checkout or install (``rlsched build-sim``, about a minute; needs
``rlsched[native]`` and a C compiler with the Python headers). The build goes to a
cache folder named by a hash of the sources it was made from (:func:`source_hash`),
so an edited source is never run from a stale build: a build that does not match is
ignored (with ``RLSCHED_SIM=auto``) or refused (``native``).

``RLSCHED_SIM`` chooses, read once when :mod:`trainer.sim` is imported:

- ``auto`` (default): the compiled build when one matches the sources, else Python;
- ``python``: always the Python modules;
- ``native``: the compiled build, or an ImportError that says how to build it.

``RLSCHED_SIM_BUILD`` overrides the cache root (default ``$XDG_CACHE_HOME/rlsched``,
else ``~/.cache/rlsched``). This module itself is never compiled.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

__all__ = ["MODULES", "NativeStatus", "activate", "build", "build_dir", "source_hash",
           "status"]

#: Modules compiled, in ``trainer.sim``: the event loop, the leaf-count state, the
#: placements and the policies (which pickle as Python objects do:
#: ``mypyc_attr(serializable=True)``, and may be subclassed in Python). Job tables,
#: clusters and options stay Python: their dataclasses go to rollout workers by pickle.
MODULES = ("placement", "leaves", "engine", "policies")
#: Project sources the compiled modules are typed against: a change there rebuilds too.
TYPED_AGAINST = ("trainer/sim/state.py", "trainer/sim/slurm.py",
                 "trainer/sim/speed.py", "trainer/sim/metrics.py", "trainer/sim/workload.py",
                 "db/records.py", "slurm_plugin/cluster.py", "slurm_plugin/slurm/types.py")
MODES = ("auto", "python", "native")

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parent.parent  # the folder holding trainer/, db/, slurm_plugin/
_STAMP = "rlsched-sim-native.json"


class NativeStatus:
    """What :func:`activate` found: ``mode``, ``active``, ``path`` and ``reason``."""

    def __init__(self, mode: str, active: bool, path: Path | None, reason: str) -> None:
        self.mode = mode
        self.active = active
        self.path = path
        self.reason = reason

    def __repr__(self) -> str:
        return (f"NativeStatus(mode={self.mode!r}, active={self.active}, path={self.path},"
                f" reason={self.reason!r})")


_status: NativeStatus | None = None


def _sources() -> list[Path]:
    return [_HERE / f"{m}.py" for m in MODULES] + [_ROOT / p for p in TYPED_AGAINST]


def _mypy_version() -> str:
    try:
        from importlib.metadata import version

        return version("mypy")
    except Exception:  # noqa: BLE001 - not installed: only building needs it
        return "none"


def source_hash() -> str:
    """A hash of what a build is made from: the sources, Python's version and ABI.

    mypy's version is not part of it (a build made by another mypyc runs the same code).
    """
    h = hashlib.sha256()
    h.update(f"{sys.implementation.cache_tag} {sys.version}".encode())
    for p in _sources():
        h.update(p.name.encode())
        h.update(p.read_bytes() if p.exists() else b"<missing>")
    return h.hexdigest()[:20]


def build_dir(digest: str | None = None) -> Path:
    """Where the build for ``digest`` (default: the current sources) lives."""
    root = os.environ.get("RLSCHED_SIM_BUILD")
    if root:
        base = Path(root)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        base = Path(cache) / "rlsched"
    return base / f"sim-native-{digest or source_hash()}"


def _mode() -> str:
    mode = os.environ.get("RLSCHED_SIM", "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ImportError(f"RLSCHED_SIM={mode!r}: use one of {', '.join(MODES)}")
    return mode


def _usable(path: Path, digest: str) -> str | None:
    """Why the build at ``path`` cannot be used, or ``None`` if it can."""
    stamp = path / _STAMP
    if not stamp.is_file():
        return f"no compiled build for these sources ({path} is missing)"
    try:
        meta = json.loads(stamp.read_text())
    except (OSError, ValueError) as exc:
        return f"{stamp} is unreadable ({exc})"
    if meta.get("hash") != digest:
        return f"{stamp} was built from other sources"
    missing = [m for m in MODULES if not any((path / "trainer" / "sim").glob(f"{m}.*.so"))]
    if missing:
        return f"{path} lacks {', '.join(missing)}"
    return None


def activate(package_path: list[str]) -> NativeStatus:
    """Put the matching compiled build first on ``trainer.sim``'s ``__path__``.

    Called once by ``trainer/sim/__init__.py`` before any module of :data:`MODULES` is
    imported; later calls return the first answer.

    Raises:
        ImportError: With ``RLSCHED_SIM=native`` and no usable build, or an unknown mode.
    """
    global _status
    if _status is not None:
        return _status
    mode = _mode()
    if mode == "python":
        _status = NativeStatus(mode, False, None, "RLSCHED_SIM=python")
        return _status
    digest = source_hash()
    path = build_dir(digest)
    why = _usable(path, digest)
    if why is not None:
        if mode == "native":
            raise ImportError(f"RLSCHED_SIM=native: {why}; run 'rlsched build-sim' (needs"
                              " rlsched[native] and a C compiler), or set RLSCHED_SIM=auto")
        _status = NativeStatus(mode, False, None, why)
        return _status
    broken = _load_shared(path)
    if broken is not None:  # (e.g. made on a machine with another C library)
        if mode == "native":
            raise ImportError(f"RLSCHED_SIM=native: the build in {path} does not load"
                              f" ({broken}); run 'rlsched build-sim --force' on this machine")
        _status = NativeStatus(mode, False, None, f"the build in {path} does not load"
                               f" ({broken}): 'rlsched build-sim --force' rebuilds it")
        return _status
    package_path.insert(0, str(path / "trainer" / "sim"))
    _status = NativeStatus(mode, True, path, "compiled build matches the sources")
    return _status


def _load_shared(path: Path) -> str | None:
    """Import the build's shared library (mypyc's runtime and code); why not, or None.

    mypyc's shared library is a top-level module that the compiled modules import by
    name. It is loaded from its file and registered in ``sys.modules``, not found
    through ``sys.path``: the build folder holds a ``trainer/`` folder too, and on
    ``sys.path`` it would be taken for the ``trainer`` package by any process that
    inherits that path before importing ``trainer`` (a ``spawn`` worker of ``--workers
    N`` under the editable install), hiding the real package.
    """
    import importlib.util

    for lib in sorted(path.glob("*__mypyc.*.so")):
        name = lib.name.split(".", 1)[0]
        if name in sys.modules:
            continue
        try:
            spec = importlib.util.spec_from_file_location(name, lib)
            if spec is None or spec.loader is None:
                return f"{lib.name}: not a loadable extension module"
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        except ImportError as exc:
            sys.modules.pop(name, None)
            return f"{lib.name}: {exc}"
    return None


def status() -> NativeStatus:
    """What this process runs: the compiled build or the Python modules."""
    import trainer.sim  # noqa: F401 - activates

    assert _status is not None
    return _status


_SETUP = textwrap.dedent("""\
    import sys
    from setuptools import setup
    from mypyc.build import mypycify

    out, tmp, config, *paths = sys.argv[1:]
    setup(
        name="rlsched_sim_native",
        ext_modules=mypycify(["--config-file", config, *paths], opt_level="3",
                             target_dir=tmp + "/c"),
        script_args=["build_ext", "--build-lib", out, "--build-temp", tmp + "/o"],
    )
""")

_CONFIG = textwrap.dedent("""\
    [mypy]
    python_version = {major}.{minor}
    follow_imports = silent
    ignore_missing_imports = True
""")


def build(*, force: bool = False, log: Path | None = None) -> Path:
    """Compile :data:`MODULES` with mypyc into :func:`build_dir` and return it.

    The compiler runs in a child process from the folder holding the packages; its
    output goes to ``log`` (default: a file in the temporary build folder, shown in the
    error). An existing matching build is kept unless ``force``.

    Raises:
        RuntimeError: If mypyc is missing or the compilation fails (says what to do).
    """
    digest = source_hash()
    dest = build_dir(digest)
    if not force and _usable(dest, digest) is None:
        return dest
    try:
        import mypyc  # noqa: F401
    except ImportError:
        raise RuntimeError("mypyc is not installed: pip install 'rlsched[native]'"
                           " (mypy brings mypyc)") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rlsched-sim-build-") as tmp:
        t = Path(tmp)
        out = t / "out"
        (t / "setup.py").write_text(_SETUP)
        (t / "mypy.ini").write_text(_CONFIG.format(major=sys.version_info.major,
                                                   minor=sys.version_info.minor))
        paths = [str(Path("trainer") / "sim" / f"{m}.py") for m in MODULES]
        logfile = log or t / "build.log"
        with open(logfile, "w") as fh:
            rc = subprocess.run(  # noqa: S603 - fixed arguments, no shell
                [sys.executable, str(t / "setup.py"), str(out), str(t), str(t / "mypy.ini"),
                 *paths],
                cwd=_ROOT, stdout=fh, stderr=subprocess.STDOUT, check=False,
                env=dict(os.environ, MYPY_CACHE_DIR=str(t / "mypy-cache")),
            ).returncode
        if rc != 0:
            tail = "\n".join(Path(logfile).read_text().splitlines()[-15:])
            raise RuntimeError(f"mypyc failed (exit {rc}); the end of its output:\n{tail}\n"
                               "A C compiler and the Python headers are needed (Debian:"
                               " apt-get install gcc python3-dev)")
        (out / _STAMP).write_text(json.dumps({
            "hash": digest, "modules": list(MODULES), "python": sys.version,
            "mypy": _mypy_version()}, indent=1))
        staging = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        shutil.copytree(out, staging)
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)  # (whole or not at all)
    return dest
