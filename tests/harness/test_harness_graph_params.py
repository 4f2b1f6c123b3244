"""Reading a captured graph's node arguments (GD307), on the CPU: the driver structs' layouts, the
word cutting, and the reader walking a graph that a double of libcuda describes."""

from __future__ import annotations

import ctypes
import struct

from graphready.harness.checks.pointers import graph_params as gp


def test_driver_structs_match_the_cuda_headers():
    kernel = gp._KernelNodeParams
    assert ctypes.sizeof(kernel) == 72
    assert (kernel.sharedMemBytes.offset, kernel.kernelParams.offset, kernel.extra.offset) == (32, 40, 48)
    assert (kernel.kern.offset, kernel.ctx.offset) == (56, 64)
    copy = gp._Memcpy3D
    assert ctypes.sizeof(copy) == 200
    assert (copy.srcMemoryType.offset, copy.srcDevice.offset, copy.dstDevice.offset) == (32, 48, 136)
    assert ctypes.sizeof(gp._MemsetParams) == 40


def test_words_are_the_aligned_8_byte_values_of_each_parameter():
    pointer = 0x7F12_3456_7800
    struct_param = struct.pack("<iiQ", 3, 4, pointer + 64)  # {int, int, float*}: the pointer at offset 8
    words = gp.param_words([struct.pack("<Q", pointer), struct.pack("<i", 7), struct_param])
    assert words == ((0, pointer), (2, 3 | 4 << 32), (2, pointer + 64))


def test_a_packed_buffer_is_cut_by_the_parameter_layout():
    buffer = bytes(range(24))
    assert gp.split_buffer(buffer, [(0, 8), (16, 8)]) == [buffer[:8], buffer[16:]]
    assert gp.split_buffer(buffer, []) == [buffer]


class FakeDriver:
    """Answers the libcuda calls the reader makes from Python descriptions of graphs and nodes.

    graphs: graph handle -> node handles; nodes: node handle -> (type, details). Kernel arguments
    live in real host buffers, so the reader's pointer reads are exercised as on a GPU.
    """

    def __init__(self, graphs: dict[int, list[int]], nodes: dict[int, tuple[int, dict]]):
        self.graphs, self.nodes, self.keep = graphs, nodes, []
        self.layouts: dict[int, list[tuple[int, int]]] = {}
        self.names: dict[int, bytes] = {}

    def kernel(self, func: int, name: bytes, params: list[bytes], packed: bool = False) -> dict:
        """A kernel node's details: arguments in a kernelParams array, or packed in an `extra` buffer."""
        layout, offset = [], 0
        for raw in params:
            offset = (offset + 7) // 8 * 8
            layout.append((offset, len(raw)))
            offset += len(raw)
        self.layouts[func], self.names[func] = layout, name
        if packed:
            buffer = ctypes.create_string_buffer(b"".join(raw.ljust(8, b"\0") for raw in params))
            size = ctypes.c_size_t(len(buffer.raw) - 1)
            extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buffer), 2, ctypes.addressof(size), 0)
            self.keep += [buffer, size, extra]
            return {"func": func, "extra": ctypes.addressof(extra)}
        buffers = [ctypes.create_string_buffer(raw, len(raw)) for raw in params]
        slots = (ctypes.c_void_p * len(buffers))(*[ctypes.addressof(b) for b in buffers])
        self.keep += [*buffers, slots]
        return {"func": func, "kernelParams": ctypes.addressof(slots)}

    def cuGraphGetNodes(self, graph, handles, count):
        nodes = self.graphs[graph.value]
        if handles is not None:
            for i, node in enumerate(nodes):
                handles[i] = node
        count._obj.value = len(nodes)
        return 0

    def cuGraphNodeGetType(self, node, kind):
        kind._obj.value = self.nodes[node.value][0]
        return 0

    def cuGraphKernelNodeGetParams_v2(self, node, params):
        for field, value in self.nodes[node.value][1].items():
            setattr(params._obj, field, value)
        return 0

    def cuFuncGetParamInfo(self, func, index, offset, size):
        layout = self.layouts.get(func.value, [])
        if index >= len(layout):
            return 1  # CUDA_ERROR_INVALID_VALUE: past the last parameter
        offset._obj.value, size._obj.value = layout[index]
        return 0

    def cuFuncGetName(self, name, func):
        name._obj.value = self.names[func.value]
        return 0

    def cuGraphMemcpyNodeGetParams(self, node, params):
        for field, value in self.nodes[node.value][1].items():
            setattr(params._obj, field, value)
        return 0

    def cuGraphMemsetNodeGetParams(self, node, params):
        params._obj.dst = self.nodes[node.value][1]["dst"]
        return 0

    def cuGraphChildGraphNodeGetGraph(self, node, graph):
        graph._obj.value = self.nodes[node.value][1]["graph"]
        return 0


def _word(value: int) -> bytes:
    return struct.pack("<Q", value)


def test_reader_walks_kernels_copies_sets_and_child_graphs():
    a, b, c = 0x7F00_0000_0000, 0x7F00_0010_0000, 0x7F00_0020_0000
    driver = FakeDriver({}, {})
    driver.nodes = {
        11: (gp.NODE_KERNEL, driver.kernel(0xF1, b"_Z6doublePfS_", [_word(a), _word(b), struct.pack("<i", 1024)])),
        12: (gp.NODE_MEMCPY, {"srcMemoryType": 2, "srcDevice": b, "srcXInBytes": 16,
                              "dstMemoryType": 1, "dstHost": 0x1000}),
        13: (gp.NODE_CHILD_GRAPH, {"graph": 200}),
        21: (gp.NODE_MEMSET, {"dst": c}),
        22: (gp.NODE_KERNEL, driver.kernel(0xF2, b"triton_add", [_word(c), struct.pack("<i", 3)], packed=True)),
        23: (5, {}),  # an empty node: nothing to read
    }
    driver.graphs = {100: [11, 12, 13], 200: [21, 22, 23]}
    read = gp.read_graph(100, driver)
    assert read.unreadable == 0
    assert [(n.kind, n.name, n.words) for n in read.nodes] == [
        ("kernel", "_Z6doublePfS_", ((0, a), (1, b))),
        ("memcpy", "memcpy", ((0, b + 16),)),  # the host destination is not a device pointer
        ("memset", "memset", ((0, c),)),
        ("kernel", "triton_add", ((0, c),)),
    ]


def test_a_kernel_without_a_parameter_layout_is_counted_unreadable():
    driver = FakeDriver({100: [11, 12]}, {})
    details = driver.kernel(0xF1, b"k", [_word(1)])
    driver.nodes = {11: (gp.NODE_KERNEL, details), 12: (gp.NODE_KERNEL, driver.kernel(0xF2, b"no_args", []))}
    driver.cuFuncGetParamInfo = lambda func, index, offset, size: 801 if func.value == 0xF1 else 1
    read = gp.read_graph(100, driver)  # 801 CUDA_ERROR_NOT_SUPPORTED: a driver that cannot say
    assert [(n.name, n.words) for n in read.nodes] == [("no_args", ())] and read.unreadable == 1


def test_no_driver_means_no_reading():
    class Empty:
        pass

    assert gp.read_graph(100, Empty()) is None
