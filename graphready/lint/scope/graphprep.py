"""What a graph's preparation methods say about its metadata, as the captured code will see it.

Attention backends prepare a decode graph's metadata twice: before capturing it
(`init_forward_metadata_capture_cuda_graph`) and before every replay (`..._replay_cuda_graph`). An
attribute that the replay preparation sets on a metadata object, and the capture preparation never
does, was unset (or stale) while the graph recorded: the kernels and branches it chose are frozen into
the graph (SGLang's FA3 local attention, fixed in PR #6162). And a field the capture preparation fills
with a device tensor is a device tensor in the captured code, whatever its annotation says (vLLM 0.6's
`encoder_seq_lens: List[int]`, a CUDA tensor at capture, read with Python's `max` by mllama)."""

from __future__ import annotations

import ast

from graphready.lint.scope.attrtypes import is_name, self_attr
from graphready.lint.scope.resolve import callee_name


def prep_kind(method: str) -> str | None:
    """"capture" / "replay" for a method that prepares a graph's inputs, by its name."""
    name = method.lower()
    if "graph" not in name:
        return None
    return "capture" if "capture" in name else "replay" if "replay" in name else None


def constructor_params(tree: ast.Module) -> dict[str, list[str]]:
    """Class name -> its positional parameters (`__init__` after self, else annotated fields in order)."""
    params = {}
    todo = [s for s in tree.body if isinstance(s, ast.ClassDef)]  # module level and nested; one not found here
    while todo:                                                      # makes its builder's class unknown (silent)
        cls = todo.pop()
        todo += [s for s in cls.body if isinstance(s, ast.ClassDef)]
        init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is not None:
            params[cls.name] = [a.arg for a in [*init.args.posonlyargs, *init.args.args][1:]]
        else:
            params[cls.name] = [s.target.id for s in cls.body if isinstance(s, ast.AnnAssign)
                                and isinstance(s.target, ast.Name)]
    return params


def graph_preparation(cls: ast.ClassDef, constructors: dict[str, list[str]]) -> tuple[dict[str, list[str]], set[str]]:
    """What the class's graph preparation methods say about its metadata: the replay-only attributes
    (`_replay_only`) and the attributes the capture preparation fills with device tensors
    (`meta.x = torch.full(...).cuda()`, `torch.zeros(..., device=dev)`, `.to(device)`; not `"cpu"`)."""
    methods = {s.name: s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    roots = {kind: sorted(name for name in methods if prep_kind(name) == kind) for kind in ("capture", "replay")}
    capture = _with_helpers(roots["capture"], methods)
    device_fields = {t.attr for name in capture for node in ast.walk(methods[name])
                     if isinstance(node, ast.Assign) and _device_tensor(node.value)
                     for target in node.targets for t in _stored_attributes(target)}
    return _replay_only(methods, roots, capture, constructors), device_fields


def _replay_only(methods: dict[str, ast.FunctionDef], roots: dict[str, list[str]], capture: set[str],
                 constructors: dict[str, list[str]]) -> dict[str, list[str]]:
    """attr -> [replay method, capture method] for what the replay preparation sets on metadata and the
    capture preparation does not. Empty when the class lacks either, or when the capture side builds an
    object whose positional arguments cannot be named (a class from another module)."""
    if not roots["capture"] or not roots["replay"]:
        return {}
    replay = _with_helpers(roots["replay"], methods) - capture
    captured: set[str] = set()
    for name in capture:
        named = _named_on_capture(methods[name], constructors)
        if named is None:
            return {}
        captured |= named
    return {attr: [roots["replay"][0], roots["capture"][0]]
            for name in sorted(replay) for attr in sorted(_set_for_replay(methods[name]) - captured)}


def _device_tensor(value: ast.AST) -> bool:
    """`x.cuda()`, `torch.<factory>(..., device=d)` or `x.to(d)` with `d` not `"cpu"` (nor a dtype)."""
    if not isinstance(value, ast.Call) or not isinstance(value.func, ast.Attribute):
        return False
    func = value.func
    if func.attr == "cuda":
        return True
    device = next((k.value for k in value.keywords if k.arg == "device"), None)
    if func.attr == "to" and device is None and value.args and _names_a_device(value.args[0]):
        device = value.args[0]
    on_torch = isinstance(func.value, ast.Name) and func.value.id == "torch"
    return (on_torch or func.attr == "to") and device is not None \
        and not (isinstance(device, ast.Constant) and device.value == "cpu")


def _names_a_device(node: ast.AST) -> bool:
    """`"cuda:0"`, `device`, `self.runner.device`: not `torch.int32`."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.startswith("cuda")
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return "device" in name


def _with_helpers(names: list[str], methods: dict[str, ast.FunctionDef]) -> set[str]:
    """The methods and the class's own helpers they call (`self._update_local_attn_metadata(...)`)."""
    seen, todo = set(names), list(names)
    while todo:
        for node in ast.walk(methods[todo.pop()]):
            callee = self_attr(node.func) if isinstance(node, ast.Call) else None
            if callee in methods and callee not in seen and prep_kind(callee) is None:
                seen.add(callee)
                todo.append(callee)
    return seen


def _stored_attributes(node: ast.AST) -> list[ast.Attribute]:
    """`meta.x = ...` targets, not the backend's own `self.x` (its state, not the metadata)."""
    return [t for t in ast.walk(node) if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
            and not is_name(t.value, "self")]


def _setattr_name(node: ast.AST) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        return node.args[1].value
    return None


def _named_on_capture(method: ast.AST, constructors: dict[str, list[str]]) -> set[str] | None:
    """Attributes the capture preparation sets, to anything, None included: stores, `setattr`, keyword
    arguments, and positional arguments of a class built here; None when a positional argument goes to
    a class of another module (its field names are unknown here)."""
    named: set[str] = set()
    for node in ast.walk(method):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            named |= {t.attr for t in _stored_attributes(node)}
        elif isinstance(node, ast.Call):
            named |= {k.arg for k in node.keywords if k.arg}
            if (name := _setattr_name(node)) is not None:
                named.add(name)
            callee = callee_name(node.func)  # `Meta(...)`, `backends.Meta(...)`: a class by its capitalised name
            if node.args and callee and callee[:1].isupper():
                if callee not in constructors:
                    return None
                named |= set(constructors[callee][:len(node.args)])
    return named


def _set_for_replay(method: ast.AST) -> set[str]:
    """Attributes the replay preparation sets to a value (setting None clears, it adds nothing)."""
    found = set()
    for node in ast.walk(method):
        if isinstance(node, ast.Assign) and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            found |= {t.attr for target in node.targets for t in _stored_attributes(target)}
        elif (name := _setattr_name(node)) is not None:
            found.add(name)
    return found
