"""GD307's classification on the CPU: allocator snapshots in torch's format, owners, verdicts,
allocation stacks from the recorded history, and the tensors a unit reaches."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from graphready.harness.checks.pointers import alloc_history
from graphready.harness.checks.pointers import pointer_audit as pa
from graphready.harness.checks.pointers.graph_params import NodeWords
from graphready.harness.checks.pointers.reachable import reachable_tensors

GRAPH_POOL = (1, 0)
BASE = 0x7F40_0000_0000
HERE = str(Path(__file__).resolve())
TORCH_FILE = str(Path(torch.__file__).resolve())


def _segments() -> list[dict]:
    """Two regular-pool segments and one of the graph's pool, as `torch.cuda.memory._snapshot()` lists them."""
    frames = [{"filename": TORCH_FILE, "line": 1, "name": "empty"}, {"filename": HERE, "line": 42, "name": "layer"}]
    regular = [
        {"address": BASE, "size": 4096, "state": "active_allocated", "frames": frames},  # the input
        {"address": BASE + 4096, "size": 4096, "state": "active_allocated"},  # a weight the unit reaches
        {"address": BASE + 8192, "size": 4096, "state": "inactive"},  # freed
        {"address": BASE + 12288, "size": 4096, "state": "active_allocated", "frames": frames},  # nobody named
        {"address": BASE + 16384, "size": 4096, "state": "active_pending_free"},  # freed, awaiting its stream
    ]
    other_pool = [{"address": BASE + 0x10_0000, "size": 8192, "state": "active_allocated"}]
    pool = [{"address": BASE + 0x20_0000, "size": 8192, "state": "inactive"}]
    return [
        {"segment_pool_id": (0, 0), "blocks": regular},
        {"segment_pool_id": (7, 1), "blocks": other_pool},
        {"segment_pool_id": GRAPH_POOL, "blocks": pool},
    ]


def _owners() -> pa.Owners:
    return pa.Owners([pa.Span(BASE, BASE + 4000, "input", "input 0"),
                      pa.Span(BASE + 4096, BASE + 8000, "attribute", "attribute 0")])


def _kind(value: int) -> str | None:
    found = pa.classify(value, pa.Memory.from_segments(_segments()), _owners(), GRAPH_POOL)
    return None if found is None else found[0]


def test_each_kind_of_pointer_is_told_apart():
    assert _kind(BASE + 16) == "input"
    assert _kind(BASE + 4000) == "input"  # one past the end: an end pointer, still the input's
    assert _kind(BASE + 4096 + 8) == "attribute"
    assert _kind(BASE + 8192 + 100) == pa.FREED
    assert _kind(BASE + 16384) == pa.FREED
    assert _kind(BASE + 12288 + 8) == pa.UNOWNED
    assert _kind(BASE + 0x20_0000 + 64) == pa.POOL  # the graph's own pool, live or not
    assert _kind(BASE + 0x10_0000) == pa.PRIVATE_POOL


def test_values_outside_torch_memory_are_not_pointers():
    for value in (0, 1, 4096, 2**31, BASE - 8, BASE + 20480 + 16, 2**64 - 1):
        assert _kind(value) is None


def test_a_block_rounded_up_past_its_storage_keeps_its_owner():
    assert _kind(BASE + 4096 + 4050) == "attribute"  # past the storage's bytes, inside its block


def test_unowned_blocks_are_unknown_when_python_holds_them_else_a_library_workspace():
    memory = pa.Memory.from_segments(_segments())
    nodes = [NodeWords(0, "kernel", "gemm", ((0, BASE + 12288), (1, BASE + 16), (2, 3)))]
    verdicts = pa.audit(nodes, memory, _owners(), GRAPH_POOL)
    assert [v.kind for v in verdicts] == [pa.UNOWNED, "input"]
    assert [v.kind for v in pa.resolve_unowned(verdicts, set())] == [pa.LIBRARY, "input"]
    assert [v.kind for v in pa.resolve_unowned(verdicts, {BASE + 12288})] == [pa.UNKNOWN, "input"]


ELEMENTWISE = "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocast"


def test_a_torch_kernels_stale_struct_word_is_dropped_unless_a_captured_op_was_given_the_tensor():
    """Seen on an H200 with 16 other models in the process: an elementwise kernel's argument struct held
    a word pointing at another model's 512-byte norm weight, which no op of the step touched."""
    memory = pa.Memory.from_segments(_segments())
    nodes = [NodeWords(0, "kernel", ELEMENTWISE, ((0, BASE + 12288), (1, BASE + 8192 + 8), (2, BASE + 16)))]
    verdicts = pa.resolve_unowned(pa.audit(nodes, memory, _owners(), GRAPH_POOL), {BASE + 12288})
    assert [v.kind for v in verdicts] == [pa.UNKNOWN, pa.FREED, "input"]
    kept, dropped = pa.drop_stale_bytes(verdicts, traced_reads=set())
    assert [v.kind for v in kept] == ["input"] and dropped == 2
    kept, dropped = pa.drop_stale_bytes(verdicts, traced_reads={BASE + 12288, BASE + 8192})  # ops read both
    assert [v.kind for v in kept] == [pa.UNKNOWN, pa.FREED, "input"] and dropped == 0


def test_a_triton_or_cute_kernel_keeps_every_word():
    """Launched outside the dispatcher, such a kernel's tensors never pass the op tracer: no evidence needed."""
    memory = pa.Memory.from_segments(_segments())
    nodes = [NodeWords(0, "kernel", "scale_kernel", ((0, BASE + 12288),))]
    verdicts = pa.resolve_unowned(pa.audit(nodes, memory, _owners(), GRAPH_POOL), {BASE + 12288})
    kept, dropped = pa.drop_stale_bytes(verdicts, traced_reads=set())
    assert [v.kind for v in kept] == [pa.UNKNOWN] and dropped == 0


def test_findings_group_by_block_and_say_what_and_where():
    memory = pa.Memory.from_segments(_segments())
    nodes = [NodeWords(0, "kernel", "mul", ((0, BASE + 8192), (1, BASE + 8192 + 512))),
             NodeWords(3, "kernel", "add", ((0, BASE + 8192),)),
             NodeWords(4, "kernel", "copy", ((0, BASE + 12288),))]
    verdicts = pa.resolve_unowned(pa.audit(nodes, memory, _owners(), GRAPH_POOL), {BASE + 12288})
    grouped = pa.findings_by_block(verdicts)
    assert sorted(block.start for block in grouped) == [BASE + 8192, BASE + 12288]
    freed_block = next(b for b in grouped if b.start == BASE + 8192)
    text = pa.finding_message(1024, grouped[freed_block], "model.py:12")
    assert "freed 1024-byte buffer allocated at model.py:12" in text and "node 0 (mul) and 1 more" in text
    unknown_block = next(b for b in grouped if b.start == BASE + 12288)
    assert "no input, state or object the unit reaches holds" in pa.finding_message(4096, grouped[unknown_block], None)
    held = pa.finding_message(4096, grouped[unknown_block], "run.py:7 (via cache.py:9 in grow)", "Table.rows")
    assert "buffer allocated at run.py:7 (via cache.py:9 in grow) and held by `Table.rows` that no input" in held
    later = pa.freed_later_message(4096, grouped[unknown_block], "model.py:3")
    assert "4096-byte buffer allocated at model.py:3" in later and "freed after capture" in later
    note = pa.summary_note(verdicts, 3, 1)
    assert note.startswith("pointer audit: 4 device pointers in 3 nodes (3 freed, 1 unknown)")
    assert note.endswith("1 kernel nodes' arguments unreadable")


def test_allocation_stack_names_the_innermost_user_frame():
    block = pa.Memory.from_segments(_segments()).block_at(BASE + 12288)
    location = alloc_history.user_location(block.frames, Path(HERE).parents[2])
    assert (location.path, location.line) == ("tests/harness/test_harness_pointer_audit.py", 42)
    assert alloc_history.user_location([{"filename": TORCH_FILE, "line": 3}]) is None


def test_a_buffer_made_in_an_installed_package_is_located_at_its_line():
    """HF transformers' cache allocates in site-packages (inside the standard library's tree on most Pythons):
    GD307 names that line, as the op-level checks do, not the user's call into the model."""
    import sysconfig

    installed = next(Path(p) for p in map(sysconfig.get_paths().get, ("purelib", "platlib")) if p)
    cache = {"filename": str(installed / "transformers" / "cache_utils.py"), "line": 434, "name": "lazy_init"}
    location = alloc_history.user_location([{"filename": TORCH_FILE, "line": 1}, cache, {"filename": HERE, "line": 42}])
    assert location.line == 434 and location.path.endswith("transformers/cache_utils.py")


def test_the_library_line_inside_the_users_call_is_named_too():
    """`model.to(device)` or a model's first forward is one user line; the buffer was made deeper."""
    import graphready.harness.targets.dsv4 as built_in  # harness code: a library, not the user's

    library = str(Path(built_in.__file__).resolve())
    user = {"filename": HERE, "line": 42, "name": "build"}
    torch_frame = {"filename": TORCH_FILE, "line": 1, "name": "empty"}
    library_frame = {"filename": library, "line": 9, "name": "make_cache"}
    assert alloc_history.library_line([torch_frame, library_frame, user]) == "graphready/harness/targets/dsv4.py:9 in make_cache"
    assert alloc_history.library_line([torch_frame, user]).endswith("torch/__init__.py:1 in empty")  # only torch inside
    assert alloc_history.library_line([user, library_frame]) is None  # the user's own line made it
    assert alloc_history.library_line([torch_frame, library_frame]) is None  # no user code: the harness made it


def test_a_freed_buffer_is_found_by_the_latest_allocation_covering_the_address():
    old = [{"filename": HERE, "line": 1}]
    new = [{"filename": HERE, "line": 2}]
    traces = [
        {"action": "alloc", "addr": 1000, "size": 100, "frames": old, "time_us": 1},
        {"action": "free_completed", "addr": 1000, "size": 100, "time_us": 2},
        {"action": "alloc", "addr": 1000, "size": 50, "frames": new, "time_us": 3},
        {"action": "alloc", "addr": 5000, "size": 10, "frames": old, "time_us": 4},
    ]
    assert alloc_history.allocation_event(traces, 1020)["frames"] == new
    assert alloc_history.allocation_event(traces, 1080)["size"] == 100  # past the newer, smaller block
    assert alloc_history.allocation_event(traces, 9000) is None
    assert alloc_history.latest_time(traces) == 4
    assert alloc_history.latest_time([{"action": "alloc"}]) is None


def test_frees_after_the_capture_marker_are_found():
    traces = [
        {"action": "free_requested", "addr": 1000, "time_us": 5},
        {"action": "alloc", "addr": 2000, "time_us": 9},
        {"action": "free_completed", "addr": 2000, "time_us": 12},
        {"action": "free_completed", "addr": 3000, "time_us": 13},
    ]
    assert alloc_history.freed_after(traces, [1000, 2000], since=10) == {2000}
    assert alloc_history.freed_after(traces, [1000, 2000], since=1) == {1000, 2000}


# -- the tensors a unit reaches --------------------------------------------------------------------

MODULE_TABLE = {"rope": torch.ones(3)}
UNNAMED = torch.ones(2)


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x):
        return self.proj(x) * self.scale * helper()


def helper():
    return MODULE_TABLE["rope"].sum()


@functools.lru_cache(maxsize=1)
def cached_table() -> torch.Tensor:
    return torch.zeros(5)


class Slotted:
    __slots__ = ("kept",)

    def __init__(self, kept):
        self.kept = kept


def _ids(tensors) -> set[int]:
    return {id(t) for t in tensors}


def test_reach_follows_modules_closures_partials_slots_and_named_globals():
    layer = Layer()
    captured = torch.zeros(4)
    slotted = Slotted(torch.zeros(6))

    def step(x):
        return layer(x) + captured.sum() + slotted.kept.sum()

    found = _ids(reachable_tensors([functools.partial(step, torch.zeros(1))]))
    expected = [layer.proj.weight, layer.proj.bias, layer.scale, captured, slotted.kept]
    assert _ids(expected) <= found
    assert id(UNNAMED) not in found  # a module global no walked code names


def test_a_global_is_reached_through_the_functions_that_name_it():
    assert id(MODULE_TABLE["rope"]) in _ids(reachable_tensors([helper]))
    assert id(MODULE_TABLE["rope"]) not in _ids(reachable_tensors([lambda x: x * 2]))


def test_methods_of_user_classes_reach_the_globals_they_name():
    assert id(MODULE_TABLE["rope"]) in _ids(reachable_tensors([Layer().forward]))


def test_a_tensor_only_an_lru_cache_holds_is_not_reached():
    table = cached_table()

    def step(x):
        return x * cached_table()

    assert id(table) not in _ids(reachable_tensors([step]))


def test_the_walk_stops_at_its_budget():
    chain = [torch.zeros(1)]
    for _ in range(50):
        chain = [chain]
    assert reachable_tensors([chain], budget=10) == []
    assert len(reachable_tensors([chain])) == 1


# -- a graph recorded on an H100 (torch 2.11, CUDA 13): cuBLAS GEMV, Triton, a copy, dropout, a
# -- table held only by an lru_cache; the words are what the driver gave, non-pointers included ----

H100 = Path(__file__).resolve().parents[1] / "fixtures" / "pointer_audit_h100.json"


def _recorded():
    import json

    data = json.loads(H100.read_text())
    nodes = [NodeWords(n["index"], n["kind"], n["name"], tuple(map(tuple, n["words"]))) for n in data["nodes"]]
    memory = pa.Memory.from_segments(data["segments"])
    owners = pa.Owners(pa.Span(*owner) for owner in data["owners"])
    verdicts = pa.audit(nodes, memory, owners, tuple(data["graph_pool"]))
    return data, nodes, pa.resolve_unowned(verdicts, set(data["held_by_python"]))


def test_recorded_graph_classifies_as_it_did_on_the_gpu():
    data, _, verdicts = _recorded()
    assert [[v.node, v.value, v.kind] for v in verdicts] == data["verdicts"]


def test_recorded_graph_ignores_host_addresses_and_packed_integers():
    _, nodes, verdicts = _recorded()
    pointers = {v.value for v in verdicts}
    words = [value for node in nodes for _, value in node.words if value]
    assert len(words) > 10 * len(pointers)  # sizes, strides, seeds: most words are not pointers
    gemv = nodes[0].words
    assert any(value >> 32 == 0x7FFF for _, value in gemv)  # cuBLAS alpha/beta: host stack addresses
    assert not any(value >> 32 == 0x7FFF for value in pointers)


def test_recorded_graph_tells_library_state_from_an_unowned_table():
    _, nodes, verdicts = _recorded()
    kinds = [v.kind for v in verdicts]
    assert kinds.count(pa.LIBRARY) == 2  # dropout's Philox seed and offset: only C++ holds them
    assert kinds.count(pa.UNKNOWN) == 1  # the table only the lru_cache holds
    assert pa.FREED not in kinds
    copy = next(n for n in nodes if n.kind == "memcpy")
    assert {v.kind for v in verdicts if v.node == copy.index} == {"attribute"}
