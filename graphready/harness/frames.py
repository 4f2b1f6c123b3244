"""Map a Python stack to the first frame in user code, so a finding points at the line to fix.

"User code" is everything except torch, the standard library, the harness itself, the GPU
kernel DSL runtimes, the extension libraries (CuPy) that sit between a user's call and the CUDA
driver, and the code torch.compile generates (its cache directory: a line there names no file the
user wrote). Cython-compiled code (`.pyx` frames in a traceback) is never user code: its filenames are
relative to the extension's source tree and name no file the user can edit. Other installed
packages are user code too (site-packages, which often sits inside the standard library's tree):
HF transformers' modeling code is where the hazards of its models are. Every check locates with
this one notion (`is_user_file`), so a finding lands on the same line whichever check makes it.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

_HARNESS_DIR = str(Path(__file__).resolve().parent)
_LIBRARY_PACKAGES = (
    "torch", "triton", "cutlass", "cuda", "nvidia", "numpy", "_pytest", "pluggy", "cupy", "cupy_backends", "cupyx",
)
# Library frames that explain a finding ("raised inside ..."); torch's own internals add nothing.
_EXTENSION_PACKAGES = ("cupy", "cupy_backends", "cupyx", "triton", "cutlass", "cuda", "nvidia")
_COMPILED_SUFFIXES = (".pyx", ".pxd", ".pxi")


@dataclass(frozen=True)
class Location:
    path: str
    line: int

    def describe(self) -> str:
        return f"{self.path}:{self.line}"


def relative_path(filename: str, root: Path | None = None) -> str:
    """`filename` relative to `root` (default: the working directory), '/'-separated."""
    path = Path(filename)
    try:
        path = path.resolve()
        return path.relative_to((root or Path.cwd()).resolve()).as_posix()
    except (ValueError, OSError):
        return path.as_posix()


def _package_dirs(names: tuple[str, ...]) -> set[str]:
    dirs = set()
    for name in names:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            dirs.add(os.path.realpath(os.path.dirname(file)))
    return dirs


def _library_dirs() -> tuple[str, ...]:
    """The harness, the standard library, the library packages imported so far and the compiler's generated code.
    The line tracer asks once per Python call: built afresh (realpath, sysconfig) it cost ~1 ms a call and made a
    traced dsv4 step 200x slower, so it is cached per set of the packages' files (a library imported later, CuPy
    say, still joins it)."""
    package_files = tuple(getattr(sys.modules.get(name), "__file__", None) for name in _LIBRARY_PACKAGES)
    return _library_dirs_of(package_files, _compiler_cache_dir())


def _compiler_cache_dir() -> str | None:
    """Where torch.compile writes the Python it generates (inductor's cache), once the compiler is loaded."""
    cache_dir_utils = sys.modules.get("torch._inductor.runtime.cache_dir_utils")
    if cache_dir_utils is None:
        return None
    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or _default_compiler_cache(cache_dir_utils)


@functools.lru_cache(maxsize=1)
def _default_compiler_cache(cache_dir_utils) -> str:
    return cache_dir_utils.default_cache_dir()


@functools.lru_cache(maxsize=64)
def _library_dirs_of(package_files: tuple[str | None, ...], compiler_cache: str | None) -> tuple[str, ...]:
    dirs = {_HARNESS_DIR} | {os.path.realpath(os.path.dirname(file)) for file in package_files if file}
    if compiler_cache:
        dirs.add(os.path.realpath(compiler_cache))
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.realpath(path))
    return tuple(sorted(dirs))


def _under(filename: str, dirs: tuple[str, ...]) -> bool:
    resolved = os.path.realpath(filename)
    return any(resolved == d or resolved.startswith(d + os.sep) for d in dirs)


@functools.lru_cache(maxsize=4096)
def _is_user_file(filename: str, library_dirs: tuple[str, ...]) -> bool:
    """Outside every directory of `library_dirs` (and not compiled, not synthetic): the code whose globals
    `checks/pointers/reachable` walks; locating a finding also takes installed packages (`is_user_file`)."""
    if not filename or filename.startswith("<") or filename.endswith(_COMPILED_SUFFIXES):
        return False
    return not _under(filename, library_dirs)


@functools.lru_cache(maxsize=1)
def _site_dirs() -> tuple[str, ...]:
    """Where installed packages live: site-packages, which often sits inside the standard library's tree."""
    import site

    dirs = {sysconfig.get_paths().get(key) for key in ("purelib", "platlib")}
    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    return tuple(sorted(os.path.realpath(d) for d in dirs if d))


@functools.lru_cache(maxsize=4096)
def _is_located_file(filename: str, library_dirs: tuple[str, ...], site_dirs: tuple[str, ...]) -> bool:
    """Where a finding may point: user code, or an installed package other than the listed libraries (HF
    transformers' modeling code in site-packages: the line that does it, not the standard library)."""
    if _is_user_file(filename, library_dirs):
        return True
    if not filename or filename.startswith("<") or filename.endswith(_COMPILED_SUFFIXES):
        return False
    installed_libraries = tuple(d for d in library_dirs if _under(d, site_dirs))  # torch, triton, numpy...
    return _under(filename, site_dirs) and not _under(filename, (*installed_libraries, _HARNESS_DIR))


def is_user_file(filename: str) -> bool:
    """Where a finding may point: the user's code or an installed package other than the listed libraries."""
    return _is_located_file(filename, _library_dirs(), _site_dirs())


def user_frame(frames: list[traceback.FrameSummary], root: Path | None = None) -> Location | None:
    """The innermost user frame of `frames` (ordered outermost first, as traceback returns them)."""
    library_dirs, site_dirs = _library_dirs(), _site_dirs()
    for frame in reversed(frames):
        if _is_located_file(frame.filename, library_dirs, site_dirs):
            return Location(relative_path(frame.filename, root), frame.lineno or 0)
    return None


def current_user_frame(root: Path | None = None) -> Location | None:
    """The innermost user frame of the running stack; cheap enough to call once per traced op."""
    library_dirs, site_dirs = _library_dirs(), _site_dirs()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _is_located_file(filename, library_dirs, site_dirs):
            return Location(relative_path(filename, root), frame.f_lineno)
        frame = frame.f_back
    return None


def exception_user_frame(tb: TracebackType | None, root: Path | None = None) -> Location | None:
    return user_frame(traceback.extract_tb(tb), root)


def extension_frame(frames: list[traceback.FrameSummary]) -> str | None:
    """The innermost extension-library frame below the innermost user frame, as `file:line`.

    A sync or capture error raised inside CuPy is located at the user's call; this is the detail
    that says which library call it was. None when the innermost frames are user code or torch.
    """
    extension_dirs = tuple(sorted(_package_dirs(_EXTENSION_PACKAGES)))
    for frame in reversed(frames):
        if is_user_file(frame.filename):
            return None
        compiled = frame.filename.endswith(_COMPILED_SUFFIXES)
        if compiled or (extension_dirs and _under(frame.filename, extension_dirs)):
            name = frame.filename if compiled else relative_path(frame.filename)
            return f"{name}:{frame.lineno or 0}"
    return None


def exception_extension_frame(tb: TracebackType | None) -> str | None:
    return extension_frame(traceback.extract_tb(tb))
