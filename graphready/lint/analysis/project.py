"""Facts about the whole project that the analysis of every file reads (plain data: no libcst to import)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass
class ProjectFacts:
    """What every file's analysis reads about the whole project: sent to each worker process once, not with
    every file (pickled per file it was 120 MB on a 430k-line tree)."""

    tensor_functions: set[str] = field(default_factory=set)
    autograd_functions: set[str] = field(default_factory=set)
    class_fields: dict[str, dict[str, str]] = field(default_factory=dict)
    pageable_functions: set[str] = field(default_factory=set)  # dotted names of functions returning pageable CPU tensors
    captured_device_fields: set[str] = field(default_factory=set)  # metadata attrs that are device tensors at capture
    parameter_attrs: set[str] = field(default_factory=set)  # attributes the project makes parameter tensors
    one_gpu_per_process: bool = False  # config: no process of this engine drives several GPUs

    def digest(self) -> str:
        """Changes whenever any fact does: part of each file's cached-analysis key (sets and dicts sorted, so
        the same facts give the same key in every run)."""
        stated = repr((sorted(self.tensor_functions), sorted(self.autograd_functions),
                       sorted((name, sorted(fields.items())) for name, fields in self.class_fields.items()),
                       sorted(self.pageable_functions), sorted(self.captured_device_fields),
                       sorted(self.parameter_attrs), self.one_gpu_per_process))
        return hashlib.blake2b(stated.encode(), digest_size=8).hexdigest()
