"""Why transformers itself cannot decode some architectures one token at a time on a StaticCache.

The check still builds and runs every architecture; where one fails at the transformers file named
here (any file where none is named), its row says why in one line instead of the exception, and keeps
the line that raised. Each entry is a failure of the installed transformers, not of the small config:
tests/harness/test_harness_hf_target.py builds each of these on the CPU and expects it to fail there,
so an entry that transformers has since fixed fails that test. No torch import (the table uses it).
"""

from __future__ import annotations

# model type -> (the transformers file the failure comes from, "" for any; why, in one line)
LIMITS: dict[str, tuple[str, str]] = {
    "bloom": ("modeling_bloom.py", ("BLOOM's ALiBi takes a 2-D attention mask padded to the StaticCache length; "
                                    "the step passes none")),
    "cpmant": ("modeling_cpmant.py", "CPM-Ant's position bias spans the tokens seen, not the StaticCache slots"),
    "prophetnet": ("modeling_prophetnet.py", ("ProphetNet's relative position bias spans the tokens seen, not the "
                                              "StaticCache slots")),
    "git": ("modeling_git.py", ("GIT's decode step widens a 2-D attention mask by its image tokens; the step "
                                "passes none")),
    "blt": ("configuration_utils.py", ("BLT's three stacks share one cache that only a DynamicCache sizes (its config "
                                       "has no layer count)")),
    "deepseek_v4": ("cache_utils.py", "StaticCache has no static layer for DeepSeek-V4's compressed attention"),
    "gemma4_assistant": ("", ("a speculative-decoding drafter: it decodes from the target model's embeddings and KV, "
                              "not from tokens")),
    "gemma4_unified_assistant": ("", ("a speculative-decoding drafter: it decodes from the target model's embeddings "
                                      "and KV, not from tokens")),
}


def limit(model_type: str, where: str) -> str | None:
    """Why `model_type` cannot decode on a StaticCache, when its failure at `where` is the known one."""
    known = LIMITS.get(model_type)
    if known is None or known[0] not in where:
        return None
    return known[1]
