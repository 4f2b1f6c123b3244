"""The lint rules, one class per code; see `rules/<code>.toml` for each rule's documentation."""

from graphready.lint.rules.capture import CaptureBranch, CaptureTemp, LazyInit, PaddedRows, ReplayOnlyMetadata
from graphready.lint.rules.compile import CompilerOpaque, HotJit, HotLock
from graphready.lint.rules.devices import CrossDevice, DefaultStreamLaunch, ImplicitCaptureStream, SetDevice
from graphready.lint.rules.memory import AllocatorCall, FrozenScalar, HotAlloc, PageableH2D
from graphready.lint.rules.shapes import BoolMaskIndex, DynamicShape, TensorSlice
from graphready.lint.rules.state import EscapingAlloc, StateRebind, StorageSwap
from graphready.lint.rules.sync import DeviceBranch, HostSync, ImplicitScalar

ALL_RULES = (
    HostSync, ImplicitScalar, DeviceBranch,
    DynamicShape, BoolMaskIndex, TensorSlice,
    HotAlloc, PageableH2D, FrozenScalar, AllocatorCall, EscapingAlloc, StateRebind, StorageSwap,
    CrossDevice, SetDevice, ImplicitCaptureStream, DefaultStreamLaunch,
    HotJit, HotLock, CompilerOpaque,
    CaptureTemp, CaptureBranch, LazyInit, ReplayOnlyMetadata, PaddedRows,
)
