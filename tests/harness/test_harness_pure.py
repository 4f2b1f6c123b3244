"""The harness's host-side logic: comparisons, growth detection, CUDA error names, user frames."""

from __future__ import annotations

import math
import sys
import traceback
from pathlib import Path

import torch

from graphready.harness.checks.capture import cuda_error_name
from graphready.harness.checks.memory import keeps_growing
from graphready.harness.compare import as_outputs, degenerate, first_difference
from graphready.harness.frames import is_user_file, relative_path, user_frame
from graphready.harness.tracer import OpTracer, first_divergence


def test_exact_comparison_by_default_and_tolerance_when_asked():
    a = torch.tensor([1.0, 2.0])
    b = a + 1e-4
    assert first_difference((a,), (a.clone(),), 0.0, 0.0) is None
    assert "output 0 differs" in first_difference((a,), (b,), 0.0, 0.0)
    assert first_difference((a,), (b,), 1e-3, 0.0) is None


def test_comparison_reports_shape_and_count_changes():
    a = torch.zeros(3)
    assert "is (4,)" in first_difference((a,), (torch.zeros(4),), 0, 0)
    assert "2 outputs instead of 1" in first_difference((a,), (a, a), 0, 0)


def test_nan_matches_nan():
    a = torch.tensor([float("nan"), 1.0])
    assert first_difference((a,), (a.clone(),), 0.0, 0.0) is None


def test_degenerate_zeros_nan_inf_only_where_eager_is_normal():
    eager = torch.tensor([1.0, -2.0])
    assert "all zeros" in degenerate((eager,), (torch.zeros(2),))
    assert "NaN" in degenerate((eager,), (torch.tensor([float("nan"), 1.0]),))
    assert "Inf" in degenerate((eager,), (torch.tensor([float("inf"), 1.0]),))
    assert degenerate((torch.zeros(2),), (torch.zeros(2),)) is None
    assert degenerate((eager,), (eager * 3,)) is None


def test_outputs_normalise_to_a_tuple_of_tensors():
    t = torch.ones(1)
    assert as_outputs(t) == (t,)
    assert as_outputs((t, t)) == (t, t)


def test_growth_needs_a_rise_at_every_recent_step():
    assert keeps_growing([100, 200, 300, 400])
    assert not keeps_growing([100, 200, 200, 300])
    assert not keeps_growing([100, 100, 100, 100])
    assert not keeps_growing([100, 200])


def test_cuda_error_names_from_enum_or_description():
    assert cuda_error_name("RuntimeError: cudaErrorStreamCaptureInvalidated: x") == "cudaErrorStreamCaptureInvalidated"
    text = "CUDA error: operation not permitted when stream is capturing\nCompile with ..."
    assert cuda_error_name(text) == "cudaErrorStreamCaptureUnsupported"
    assert cuda_error_name("dependency created on uncaptured work in another stream") == "cudaErrorStreamCaptureIsolation"
    assert cuda_error_name("something else") is None


def test_user_frame_skips_torch_and_stdlib_frames(tmp_path):
    torch_file = torch.__file__
    frames = [
        traceback.FrameSummary(str(tmp_path / "model.py"), 7, "step"),
        traceback.FrameSummary(torch_file, 100, "wrapper"),
        traceback.FrameSummary(math.__file__ if hasattr(math, "__file__") else traceback.__file__, 5, "x"),
    ]
    location = user_frame(frames, tmp_path)
    assert (location.path, location.line) == ("model.py", 7)


def test_an_installed_package_other_than_torch_is_where_a_finding_points(tmp_path):
    """HF transformers in site-packages (inside the standard library's tree on most Pythons) is where its
    models' hazards are; torch and the standard library stay skipped."""
    import json
    import sysconfig

    installed = next(Path(p) for p in map(sysconfig.get_paths().get, ("purelib", "platlib")) if p)
    modeling = installed / "transformers" / "models" / "llama" / "modeling_llama.py"
    frames = [
        traceback.FrameSummary(str(tmp_path / "model.py"), 7, "step"),
        traceback.FrameSummary(str(modeling), 321, "forward"),
        traceback.FrameSummary(torch.__file__, 100, "wrapper"),
        traceback.FrameSummary(json.__file__, 5, "dumps"),
    ]
    assert user_frame(frames, tmp_path).line == 321
    assert user_frame([frames[0], *frames[2:]], tmp_path).line == 7
    # one notion for every check: the line tracer (GD305) and the allocation stacks (GD307) stop there too
    assert is_user_file(str(modeling)) and not is_user_file(torch.__file__) and not is_user_file(json.__file__)


def test_code_the_compiler_generates_is_not_where_a_finding_points(tmp_path, monkeypatch):
    """diffllama's compiled step raised inside inductor's generated module (`/tmp/torchinductor_root/ea/c...py:1653`):
    the finding belongs to the outer frame that called the compiled model."""
    import torch._inductor.runtime.cache_dir_utils  # noqa: F401  (the compiler is loaded whenever it generated code)

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    generated = tmp_path / "inductor" / "ea" / "ceajdojf5oo6z6uphbhkccviihyoia4p4nbozxqzuumvnoiffbeg.py"
    frames = [
        traceback.FrameSummary(str(tmp_path / "model.py"), 7, "step"),
        traceback.FrameSummary(torch.__file__, 100, "compile_wrapper"),
        traceback.FrameSummary(str(generated), 1653, "call"),
    ]
    assert not is_user_file(str(generated))
    assert user_frame(frames, tmp_path).describe() == "model.py:7"


def test_relative_path_outside_the_root_stays_absolute(tmp_path):
    assert relative_path(sys.executable, tmp_path) == sys.executable or relative_path(sys.executable, tmp_path).startswith("/")


class _Counter:
    def __init__(self):
        self.step = 0

    def __call__(self, x):
        self.step += 1
        y = x.abs()
        return y * math.cos(0.1 * self.step)


def _trace(fn, x):
    tracer = OpTracer(torch.device("cpu"), named_storages={x.untyped_storage().data_ptr(): "input0"})
    with tracer:
        fn(x)
    return tracer


def test_tracer_finds_the_frozen_python_scalar_and_its_line():
    counter = _Counter()
    captured = _trace(counter, torch.randn(8))
    eager = _trace(counter, torch.randn(8))
    record, why = first_divergence(captured.records, eager.records)
    assert record.op == "mul"
    assert record.location.line == _Counter.__call__.__code__.co_firstlineno + 3
    assert "froze" in why


def test_tracer_sees_no_divergence_for_a_pure_step():
    def pure(x):
        return x.abs() * 2.0

    assert first_divergence(_trace(pure, torch.randn(4)).records, _trace(pure, torch.randn(4)).records) is None


def test_tracer_notices_a_buffer_swapped_between_steps():
    holder = {"w": torch.ones(4)}

    def step(x):
        return x * holder["w"]

    captured = _trace(step, torch.randn(4))
    holder["w"] = torch.ones(4)
    record, why = first_divergence(captured.records, _trace(step, torch.randn(4)).records)
    assert record.op == "mul" and "different buffer" in why


def _outcome(failure_error, error):
    from graphready.harness.checks.capture import CaptureOutcome
    from graphready.harness.tracer import OpFailure

    failure = OpFailure("_local_scalar_dense", None, failure_error) if failure_error != "none" else None
    return CaptureOutcome(error=error, failure=failure)


def test_capture_failure_message_names_the_cuda_error_and_the_op():
    from graphready.harness.checks.capture import failure_message

    text = failure_message(_outcome("RuntimeError: CUDA error: operation not permitted when stream is capturing", "x"))
    assert text.startswith("capture failed with cudaErrorStreamCaptureUnsupported at aten._local_scalar_dense")


def test_capture_failure_message_for_an_op_that_silently_invalidated_the_capture():
    from graphready.harness.checks.capture import failure_message

    text = failure_message(_outcome(None, "RuntimeError: operation failed due to a previous error during capture"))
    assert "cudaErrorStreamCaptureInvalidated after aten._local_scalar_dense" in text


def test_capture_failure_message_quotes_torch_when_no_cuda_call_was_made():
    from graphready.harness.checks.capture import failure_message

    torch_text = "RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture\nmore"
    text = failure_message(_outcome(torch_text, torch_text))
    assert text.startswith("capture failed at aten._local_scalar_dense: RuntimeError: Cannot copy between CPU")
    assert "more" not in text


def test_escaped_kernel_messages():
    from graphready.harness.checks.kernels import escaped_message

    assert "launches 1 kernel:" in escaped_message(1, 0)
    assert "holds 3 kernels but the eager step launches 5: 2 ran on another stream" in escaped_message(5, 3)
