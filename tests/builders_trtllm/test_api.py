"""Enable-time API check against stand-in TensorRT-LLM modules that have and lack the pinned names."""

import dataclasses
import os
import re

import pytest

from standins import build, importer
from trtllm_replayssm_builders.trtllm.api import (
    PINNED_RELEASE,
    REQUIREMENTS,
    IncompatibleTensorRTLLM,
    check_api,
    require_api,
    requirements_for,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def _req(name):
    return next(r for r in REQUIREMENTS if r.name == name)


def test_check_api_passes_on_complete_standins():
    modules = build()
    assert check_api(REQUIREMENTS, importer(modules)) == []
    assert require_api(("mamba2", "gdn", "kda"), importer(modules)) == "1.3.0rc26"


def test_check_api_reports_missing_method():
    modules = build(r for r in REQUIREMENTS if r.name != "Mamba2Metadata.prepare")
    problems = check_api(REQUIREMENTS, importer(modules))
    assert problems == ["tensorrt_llm._torch.modules.mamba.mamba2_metadata.Mamba2Metadata.prepare: missing"]


def test_check_api_reports_renamed_parameter():
    req = _req("MambaHybridCacheManagerV2.__init__")
    renamed = dataclasses.replace(
        req, params=tuple("aux_extensions" if p == "aux_cache_extensions" else p for p in req.params)
    )
    modules = build([renamed if r is req else r for r in REQUIREMENTS])
    (problem,) = check_api(REQUIREMENTS, importer(modules))
    assert "MambaHybridCacheManagerV2.__init__: lacks parameter(s) aux_cache_extensions" in problem
    assert "aux_extensions" in problem  # what the installation has instead


def test_check_api_reports_reordered_parameters():
    req = _req("MambaStateUpdateStrategy.relocate_slots")
    swapped = dataclasses.replace(req, params=("self", "new_slots", "old_slots"))
    modules = build([swapped if r is req else r for r in REQUIREMENTS])
    (problem,) = check_api(REQUIREMENTS, importer(modules))
    assert "relocate_slots: has parameters self, old_slots, new_slots in another order" in problem


def test_check_api_reports_missing_dataclass_field():
    req = _req("MambaCacheBuildContext")
    fewer = dataclasses.replace(req, fields=tuple(f for f in req.fields if f != "slot_capacity"))
    modules = build([fewer if r is req else r for r in REQUIREMENTS])
    assert check_api(REQUIREMENTS, importer(modules)) == [f"{req.qualname}: lacks field(s) slot_capacity"]


def test_check_api_reports_unimportable_module_once_per_requirement():
    modules = build()
    missing = "tensorrt_llm._torch.modules.kimi_kda.kimi_kda_mixer"
    problems = check_api(REQUIREMENTS, importer(modules, missing=missing))
    kda = [r for r in REQUIREMENTS if r.module == missing]
    assert len(problems) == len(kda) and all(f"module {missing} does not import" in p for p in problems)


def test_requirements_for_families_excludes_other_families():
    modules = build()
    missing = "tensorrt_llm._torch.modules.kimi_kda.kimi_kda_mixer"
    # KDA names missing: fine without the kda family, refused with it.
    assert require_api(("mamba2", "gdn"), importer(modules, missing=missing)) == "1.3.0rc26"
    with pytest.raises(IncompatibleTensorRTLLM, match="kimi_kda_mixer"):
        require_api(("kda",), importer(modules, missing=missing))
    families = {r.family for r in requirements_for(("gdn",))}
    assert families == {None, "gdn"}


def test_require_api_message_names_version_pin_and_every_problem():
    drop = {"Mamba2Mixer.forward", "Qwen3NextGatedDeltaNet.forward_decode"}
    modules = build((r for r in REQUIREMENTS if r.name not in drop), version="1.2.0")
    with pytest.raises(IncompatibleTensorRTLLM) as info:
        require_api(("mamba2", "gdn", "kda"), importer(modules))
    message = str(info.value)
    assert "TensorRT-LLM 1.2.0" in message and PINNED_RELEASE in message
    assert "Mamba2Mixer.forward: missing" in message
    assert "Qwen3NextGatedDeltaNet.forward_decode: missing" in message
    assert "Nothing was patched" in message


def test_require_api_without_tensorrt_llm_raises_import_error():
    with pytest.raises(ImportError, match="tensorrt_llm does not import.*install TensorRT-LLM 1.3.0rc26"):
        require_api(("mamba2",), importer({}))


def test_install_refuses_incompatible_standins_and_patches_nothing():
    from trtllm_replayssm_builders.trtllm.adapter import install, installed
    from trtllm_replayssm_builders.trtllm.config import ReplaySSMConfig

    modules = build(r for r in REQUIREMENTS if r.name != "Qwen3NextGatedDeltaNet.forward_core")
    prepare = modules["tensorrt_llm._torch.modules.mamba.mamba2_metadata"].Mamba2Metadata.prepare
    with pytest.raises(IncompatibleTensorRTLLM, match="forward_core: missing"):
        install(ReplaySSMConfig(), importer(modules))
    assert installed() is None
    meta = modules["tensorrt_llm._torch.modules.mamba.mamba2_metadata"].Mamba2Metadata
    assert meta.prepare is prepare


def test_readme_table_lists_every_requirement():
    """builders/trtllm/README.md documents exactly the names the check enforces."""
    with open(os.path.join(ROOT, "builders", "trtllm", "README.md"), encoding="utf-8") as f:
        text = f.read()
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]*)` \|", text, flags=re.M)
    documented = {(name, params) for name, params in rows}
    expected = {(f"{r.module}.{r.name}", ", ".join(r.params or r.fields)) for r in REQUIREMENTS}
    assert documented == expected
    assert PINNED_RELEASE in text
