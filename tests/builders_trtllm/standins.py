"""Stand-in TensorRT-LLM modules built from the pinned requirements: classes, methods, functions
and dataclasses with exactly the required names and parameters, bodies that do nothing. Tests
drop or rename entries to produce an installation that lacks them."""

from __future__ import annotations

import dataclasses
import types

from typing import Dict, Iterable, Optional

from trtllm_replayssm_builders.trtllm.api import REQUIREMENTS, Requirement


def _function(name: str, params) -> types.FunctionType:
    scope: dict = {}
    exec(f"def {name}({', '.join(params)}):\n    return None\n", scope)
    return scope[name]


def _module(modules: Dict[str, types.ModuleType], path: str) -> types.ModuleType:
    if path not in modules:
        modules[path] = types.ModuleType(path)
        parent, _, child = path.rpartition(".")
        if parent:
            setattr(_module(modules, parent), child, modules[path])
    return modules[path]


def build(requirements: Iterable[Requirement] = REQUIREMENTS, *, version: str = "1.3.0rc26") -> Dict[str, types.ModuleType]:
    """Module path -> stand-in module satisfying ``requirements``."""
    modules: Dict[str, types.ModuleType] = {}
    _module(modules, "tensorrt_llm").__version__ = version
    for req in requirements:
        module = _module(modules, req.module)
        head, _, method = req.name.partition(".")
        if req.fields:
            cls = dataclasses.make_dataclass(head, [(f, object, None) for f in req.fields])
            setattr(module, head, cls)
            continue
        if not method:
            if not hasattr(module, head):
                value = _function(head, req.params) if req.params else type(head, (), {})
                setattr(module, head, value)
            continue
        cls = getattr(module, head, None)
        if cls is None:
            cls = type(head, (), {})
            setattr(module, head, cls)
        setattr(cls, method, _function(method, req.params or ("self",)))
    return modules


def importer(modules: Dict[str, types.ModuleType], missing: Optional[str] = None):
    """An ``import_module`` over the stand-ins; ``missing`` makes that path fail to import."""

    def import_module(path: str):
        if path == missing or path not in modules:
            raise ModuleNotFoundError(f"No module named {path!r}")
        return modules[path]

    return import_module


def write_package(root, requirements: Iterable[Requirement] = REQUIREMENTS, *, version: str = "1.3.0rc26") -> None:
    """The same stand-ins as source files under ``root`` (an importable ``tensorrt_llm``)."""
    import os

    sources: Dict[str, list] = {"tensorrt_llm": [f"__version__ = {version!r}"]}
    classes: Dict[str, Dict[str, list]] = {}
    for req in requirements:
        sources.setdefault(req.module, [])
        head, _, method = req.name.partition(".")
        body = classes.setdefault(req.module, {})
        if req.fields:
            fields = "\n".join(f"    {f}: object = None" for f in req.fields)
            sources[req.module].append(f"@dataclasses.dataclass\nclass {head}:\n{fields}")
        elif method:
            body.setdefault(head, []).append(f"    def {method}({', '.join(req.params or ('self',))}):\n        return None")
        elif req.params:
            sources[req.module].append(f"def {head}({', '.join(req.params)}):\n    return None")
        elif head.isupper():
            sources[req.module].append(f"{head} = -1")
        else:
            body.setdefault(head, [])
    for module, lines in sources.items():
        parts = module.split(".")
        for i in range(1, len(parts)):
            package = os.path.join(root, *parts[:i])
            os.makedirs(package, exist_ok=True)
            init = os.path.join(package, "__init__.py")
            if not os.path.exists(init):
                open(init, "w").close()
        text = (
            ["import dataclasses"]
            + lines
            + [
                f"class {name}:\n" + ("\n".join(methods) if methods else "    pass")
                for name, methods in classes.get(module, {}).items()
            ]
        )
        path = os.path.join(root, *parts) + ("/__init__.py" if module == "tensorrt_llm" else ".py")
        if module == "tensorrt_llm":
            os.makedirs(os.path.join(root, "tensorrt_llm"), exist_ok=True)
        with open(path, "w") as f:
            f.write("\n\n".join(text) + "\n")
