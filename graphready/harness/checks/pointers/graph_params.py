"""Read the address-sized arguments of a captured graph's nodes through the CUDA driver API.

A kernel node keeps a copy of every argument it was launched with. `cuFuncGetParamInfo` (CUDA
12.4+) gives each parameter's size, so its bytes can be read and cut into 8-byte words: a pointer
argument, or a pointer field of a struct argument, sits on an 8-byte boundary of its parameter.
Memcpy and memset nodes give their device addresses directly; child graphs are read recursively.
Which words are really pointers is the caller's call (`pointer_audit`): only values inside an
allocation of the caching allocator count, so sizes, strides and seeds never do.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from dataclasses import dataclass

NODE_KERNEL, NODE_MEMCPY, NODE_MEMSET, NODE_CHILD_GRAPH = 0, 1, 2, 4
_MEMORY_DEVICE, _MEMORY_UNIFIED = 2, 4  # CUmemorytype values whose address is a device pointer
_PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE = 1, 2  # the `extra` launch-argument tags
_MAX_PARAMS = 4096
_PAST_LAST_PARAM = 1  # CUDA_ERROR_INVALID_VALUE: the parameter index is past the last one
_WORD = 8

c_void_p, c_size_t, c_uint, c_int, c_uint64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint64


class _KernelNodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2
    _fields_ = [
        ("func", c_void_p), ("gridDimX", c_uint), ("gridDimY", c_uint), ("gridDimZ", c_uint),
        ("blockDimX", c_uint), ("blockDimY", c_uint), ("blockDimZ", c_uint), ("sharedMemBytes", c_uint),
        ("kernelParams", c_void_p), ("extra", c_void_p), ("kern", c_void_p), ("ctx", c_void_p),
    ]


class _Memcpy3D(ctypes.Structure):  # CUDA_MEMCPY3D
    _fields_ = [
        ("srcXInBytes", c_size_t), ("srcY", c_size_t), ("srcZ", c_size_t), ("srcLOD", c_size_t),
        ("srcMemoryType", c_int), ("srcHost", c_void_p), ("srcDevice", c_uint64), ("srcArray", c_void_p),
        ("reserved0", c_void_p), ("srcPitch", c_size_t), ("srcHeight", c_size_t),
        ("dstXInBytes", c_size_t), ("dstY", c_size_t), ("dstZ", c_size_t), ("dstLOD", c_size_t),
        ("dstMemoryType", c_int), ("dstHost", c_void_p), ("dstDevice", c_uint64), ("dstArray", c_void_p),
        ("reserved1", c_void_p), ("dstPitch", c_size_t), ("dstHeight", c_size_t),
        ("WidthInBytes", c_size_t), ("Height", c_size_t), ("Depth", c_size_t),
    ]


class _MemsetParams(ctypes.Structure):  # CUDA_MEMSET_NODE_PARAMS
    _fields_ = [("dst", c_uint64), ("pitch", c_size_t), ("value", c_uint), ("elementSize", c_uint),
                ("width", c_size_t), ("height", c_size_t)]


@dataclass(frozen=True)
class NodeWords:
    """One node's candidate addresses: (parameter index, 64-bit value) pairs."""

    index: int  # position among the graph's nodes, in the order the driver lists them
    kind: str  # "kernel", "memcpy" or "memset"
    name: str  # the kernel's (mangled) name, or the node kind
    words: tuple[tuple[int, int], ...]


@dataclass
class GraphWords:
    nodes: list[NodeWords]
    unreadable: int = 0  # kernel nodes whose argument layout the driver would not give


def param_words(params: list[bytes]) -> tuple[tuple[int, int], ...]:
    """The 8-byte-aligned little-endian words of each parameter, tagged with the parameter index."""
    words = []
    for index, raw in enumerate(params):
        for offset in range(0, len(raw) - _WORD + 1, _WORD):
            words.append((index, struct.unpack_from("<Q", raw, offset)[0]))
    return tuple(words)


def split_buffer(buffer: bytes, layout: list[tuple[int, int]]) -> list[bytes]:
    """A packed argument buffer (the `extra` launch form) cut into parameters by (offset, size)."""
    if not layout:
        return [buffer]
    return [buffer[offset : offset + size] for offset, size in layout]


@functools.cache
def cuda_driver() -> ctypes.CDLL | None:
    """libcuda with the graph-reading entry points typed (None where no driver is installed)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    signatures = {
        "cuGraphGetNodes": [c_void_p, ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t)],
        "cuGraphNodeGetType": [c_void_p, ctypes.POINTER(c_int)],
        "cuGraphKernelNodeGetParams_v2": [c_void_p, ctypes.POINTER(_KernelNodeParams)],
        "cuGraphMemcpyNodeGetParams": [c_void_p, ctypes.POINTER(_Memcpy3D)],
        "cuGraphMemsetNodeGetParams": [c_void_p, ctypes.POINTER(_MemsetParams)],
        "cuGraphChildGraphNodeGetGraph": [c_void_p, ctypes.POINTER(c_void_p)],
        "cuFuncGetParamInfo": [c_void_p, c_size_t, ctypes.POINTER(c_size_t), ctypes.POINTER(c_size_t)],
        "cuKernelGetParamInfo": [c_void_p, c_size_t, ctypes.POINTER(c_size_t), ctypes.POINTER(c_size_t)],
        "cuFuncGetName": [ctypes.POINTER(ctypes.c_char_p), c_void_p],
        "cuKernelGetName": [ctypes.POINTER(ctypes.c_char_p), c_void_p],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name, None)
        if function is not None:
            function.argtypes = argtypes
            function.restype = c_int
    return lib


def _has(lib: ctypes.CDLL, name: str) -> bool:
    try:
        getattr(lib, name)
    except AttributeError:
        return False
    return True


def graph_nodes(lib: ctypes.CDLL, graph: int) -> list[int]:
    """The node handles of a cudaGraph_t (OSError when the driver refuses)."""
    count = c_size_t(0)
    if lib.cuGraphGetNodes(c_void_p(graph), None, ctypes.byref(count)) != 0:
        raise OSError("cuGraphGetNodes failed")
    handles = (c_void_p * max(count.value, 1))()
    if count.value and lib.cuGraphGetNodes(c_void_p(graph), handles, ctypes.byref(count)) != 0:
        raise OSError("cuGraphGetNodes failed")
    return [handles[i] for i in range(count.value)]


def _layout(lib: ctypes.CDLL, params: _KernelNodeParams) -> list[tuple[int, int]] | None:
    """(offset, size) of each kernel parameter, from the function or, failing that, its CUkernel;
    None when neither can say (a driver before CUDA 12.4)."""
    for getter, handle in (("cuFuncGetParamInfo", params.func), ("cuKernelGetParamInfo", params.kern)):
        if not handle or not _has(lib, getter):
            continue
        layout, status = [], 0
        offset, size = c_size_t(0), c_size_t(0)
        for index in range(_MAX_PARAMS):
            status = getattr(lib, getter)(c_void_p(handle), index, ctypes.byref(offset), ctypes.byref(size))
            if status != 0:
                break
            layout.append((offset.value, size.value))
        if layout or status == _PAST_LAST_PARAM:
            return layout
    return None


def _kernel_name(lib: ctypes.CDLL, params: _KernelNodeParams) -> str:
    for getter, handle in (("cuFuncGetName", params.func), ("cuKernelGetName", params.kern)):
        name = ctypes.c_char_p()
        if handle and _has(lib, getter) and getattr(lib, getter)(ctypes.byref(name), c_void_p(handle)) == 0 and name.value:
            return name.value.decode("utf-8", "replace")
    return "kernel"


def _extra_buffer(extra: int) -> bytes | None:
    """The packed argument buffer of a kernel launched with `extra` (tag, value) pairs."""
    items = ctypes.cast(c_void_p(extra), ctypes.POINTER(c_void_p))
    pointer, size = None, None
    for i in range(0, 32, 2):
        tag = items[i] or 0
        if tag == _PARAM_BUFFER_POINTER:
            pointer = items[i + 1]
        elif tag == _PARAM_BUFFER_SIZE:
            size = ctypes.cast(c_void_p(items[i + 1]), ctypes.POINTER(c_size_t))[0]
        else:
            break
    if not pointer or not size:
        return None
    return ctypes.string_at(pointer, size)


def _kernel_words(lib: ctypes.CDLL, node: int) -> tuple[str, tuple[tuple[int, int], ...]] | None:
    params = _KernelNodeParams()
    if lib.cuGraphKernelNodeGetParams_v2(c_void_p(node), ctypes.byref(params)) != 0:
        return None
    layout = _layout(lib, params)
    if layout is None:
        return None
    if not layout:
        return _kernel_name(lib, params), ()
    if params.kernelParams:
        slots = ctypes.cast(c_void_p(params.kernelParams), ctypes.POINTER(c_void_p))
        raw = [ctypes.string_at(slots[i], size) if slots[i] else b"" for i, (_, size) in enumerate(layout)]
    elif params.extra:
        buffer = _extra_buffer(params.extra)
        if buffer is None:
            return None
        raw = split_buffer(buffer, layout)
    else:
        return None
    return _kernel_name(lib, params), param_words(raw)


def _copy_words(lib: ctypes.CDLL, node: int) -> tuple[tuple[int, int], ...]:
    params = _Memcpy3D()
    if lib.cuGraphMemcpyNodeGetParams(c_void_p(node), ctypes.byref(params)) != 0:
        return ()
    words = []
    if params.srcMemoryType in (_MEMORY_DEVICE, _MEMORY_UNIFIED) and params.srcDevice:
        words.append((0, params.srcDevice + params.srcXInBytes))
    if params.dstMemoryType in (_MEMORY_DEVICE, _MEMORY_UNIFIED) and params.dstDevice:
        words.append((1, params.dstDevice + params.dstXInBytes))
    return tuple(words)


def _set_words(lib: ctypes.CDLL, node: int) -> tuple[tuple[int, int], ...]:
    params = _MemsetParams()
    if lib.cuGraphMemsetNodeGetParams(c_void_p(node), ctypes.byref(params)) != 0 or not params.dst:
        return ()
    return ((0, params.dst),)


def _walk(lib: ctypes.CDLL, graph: int, out: GraphWords, depth: int = 0) -> None:
    node_type = c_int(-1)
    for node in graph_nodes(lib, graph):
        if lib.cuGraphNodeGetType(c_void_p(node), ctypes.byref(node_type)) != 0:
            raise OSError("cuGraphNodeGetType failed")
        index = len(out.nodes) + out.unreadable
        if node_type.value == NODE_KERNEL:
            read = _kernel_words(lib, node)
            if read is None:
                out.unreadable += 1
            else:
                out.nodes.append(NodeWords(index, "kernel", read[0], read[1]))
        elif node_type.value == NODE_MEMCPY:
            out.nodes.append(NodeWords(index, "memcpy", "memcpy", _copy_words(lib, node)))
        elif node_type.value == NODE_MEMSET:
            out.nodes.append(NodeWords(index, "memset", "memset", _set_words(lib, node)))
        elif node_type.value == NODE_CHILD_GRAPH and depth < 8:
            child = c_void_p()
            if lib.cuGraphChildGraphNodeGetGraph(c_void_p(node), ctypes.byref(child)) == 0 and child.value:
                _walk(lib, child.value, out, depth + 1)


def read_graph(raw_graph: int, lib: ctypes.CDLL | None = None) -> GraphWords | None:
    """Every kernel, memcpy and memset node's candidate addresses; None when the driver API is unusable.

    `lib` is libcuda (loaded when not given; the tests hand in a double of the driver).
    """
    lib = lib or cuda_driver()
    if lib is None or not _has(lib, "cuGraphKernelNodeGetParams_v2"):
        return None
    out = GraphWords(nodes=[])
    try:
        _walk(lib, raw_graph, out)
    except OSError:
        return None
    return out
