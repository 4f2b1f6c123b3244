"""Cache keys for one function's rule hits: what its analysis reads, and nothing else of its file.

The rules see a function's own text and index facts, the facts of its module (imports, module-level calls and
containers, classes, the globals its file's hot code rebinds, the hot and warm-up sets) and, for a method, the
hot methods of its class (they teach it what `self.*` holds). A key made of exactly these lets an edit re-analyse
only the functions it can change: a comment, a cold function, or lines moved above it change no hot function's
key (its lines are offsets from its first; its hits are kept so too). Plain text and index data, so no libcst is
imported to find that nothing needs analysing.
"""

from __future__ import annotations

import hashlib
import json

from graphready.lint.analysis.multidevice import handles_several_devices
from graphready.lint.datacodec import encode
from graphready.lint.scope.index import FunctionInfo, ModuleIndex
from graphready.lint.scope.positions import offsets


def _digest(value: object) -> str:
    return hashlib.blake2b(repr(value).encode(), digest_size=16).hexdigest()


def function_keys(index: ModuleIndex, text: str, targets: list[tuple[FunctionInfo, bool]], hot_keys: set[str],
                  warm_up: tuple[set[str], ...], host_params: dict[str, list[str]], salt: str) -> dict[str, str]:
    """Each target's key (qualname -> key); `salt` covers the whole project's facts and the settings. `index`: the
    file's index, or a FileJob (which carries the same module facts)."""
    lines = text.splitlines(keepends=True)

    def own(info: FunctionInfo, hot: bool) -> tuple:
        source = "".join(lines[info.first_line - 1:info.end_lineno])
        return json.dumps(offsets(encode(info), info), sort_keys=True), hot, source, host_params.get(info.key)

    module = _digest((
        index.module, sorted(index.imports.items()), sorted(index.global_calls.items()),
        sorted(index.global_containers), json.dumps(encode(index.classes), sort_keys=True),
        handles_several_devices(text), sorted(hot_keys), [sorted(keys) for keys in warm_up], salt,
        [own(info, hot) for info, hot in targets if hot and info.declares_global],  # the globals hot code rebinds
    ))
    classes: dict[str, str] = {}
    for qualname, found in index.classes.items():
        methods = (index.functions.get(f"{qualname}.{name}") for name in found.methods)
        classes[qualname] = _digest([own(info, True) for info in methods if info is not None and info.key in hot_keys])
    return {info.qualname: _digest((module, classes.get(info.class_qualname or ""), own(info, hot)))
            for info, hot in targets}
