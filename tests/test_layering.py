"""Import layering: the reference needs no Triton; the core package pulls in no TensorRT side."""

import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_reference_imports_without_triton():
    proc = _run("""
        import sys
        sys.modules["triton"] = None  # any `import triton` now raises ImportError
        import trtllm_replayssm.reference
        loaded = [m for m in sys.modules if m.startswith("triton.") or m.startswith("trtllm_replayssm.kernels")]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


def test_core_package_imports_no_plugin_builder_or_tensorrt():
    proc = _run("""
        import sys
        import trtllm_replayssm, trtllm_replayssm.cli, trtllm_replayssm.memory
        banned = ("trtllm_replayssm_plugins", "trtllm_replayssm_builders", "tensorrt", "tensorrt_llm")
        loaded = [m for m in sys.modules if m.split(".")[0] in banned]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


def test_plugin_package_imports_no_builder_or_tensorrt():
    """plugins -> core only; TensorRT is imported when a plugin is registered, not on import."""
    proc = _run(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, "tests", "plugins")!r})
        import plugin_cases  # trtllm_replayssm_plugins from plugins/ when not installed
        import trtllm_replayssm_plugins.tensorrt_plugin, trtllm_replayssm_plugins.network
        import trtllm_replayssm_plugins.export
        banned = ("trtllm_replayssm_builders", "tensorrt", "tensorrt_llm")
        loaded = [m for m in sys.modules if m.split(".")[0] in banned]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


def test_core_cli_parser_names_no_builder():
    """The core CLI reaches builders only through entry points (group trtllm_replayssm.cli):
    with none installed, building every parser imports no builder."""
    proc = _run("""
        import importlib.metadata, sys
        importlib.metadata.entry_points = lambda group: []
        from trtllm_replayssm.cli import build_parser
        build_parser()
        loaded = [m for m in sys.modules if m.split(".")[0] == "trtllm_replayssm_builders"]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


def test_hf_builders_import_no_transformers():
    """builders.hf -> core only: it recognises transformers mixers by class name, so importing it
    (and the demo subcommand's parser) needs no transformers."""
    proc = _run(f"""
        import importlib.util, sys
        sys.modules["transformers"] = None  # any `import transformers` now raises ImportError
        spec = importlib.util.spec_from_file_location(
            "trtllm_replayssm_builders", {os.path.join(ROOT, "builders", "__init__.py")!r},
            submodule_search_locations=[{os.path.join(ROOT, "builders")!r}])
        sys.modules["trtllm_replayssm_builders"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["trtllm_replayssm_builders"])
        import argparse
        import trtllm_replayssm_builders.hf, trtllm_replayssm_builders.hf.demo
        from trtllm_replayssm_builders.cli import add_demo
        add_demo(argparse.ArgumentParser().add_subparsers())
        banned = ("trtllm_replayssm_plugins", "tensorrt", "tensorrt_llm")
        loaded = [m for m in sys.modules if m.split(".")[0] in banned]
        assert not loaded, loaded
    """)
    assert proc.returncode == 0, proc.stderr


# Source trees and the package each is imported as; examples/ and benchmarks/ are scripts.
SOURCE_TREES = {
    "trtllm_replayssm": "trtllm_replayssm",
    "plugins": "trtllm_replayssm_plugins",
    "builders": "trtllm_replayssm_builders",
    "examples": "examples",
    "benchmarks": "benchmarks",
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _source_files():
    """(path, dotted package of the module) for every .py file of the source trees."""
    for tree, package in SOURCE_TREES.items():
        for folder, _, files in os.walk(os.path.join(ROOT, tree)):
            for f in sorted(files):
                if f.endswith(".py"):
                    rel = os.path.relpath(folder, os.path.join(ROOT, tree))
                    yield os.path.join(folder, f), ".".join([package] + ([] if rel == "." else rel.split(os.sep)))


def _path(module: str) -> str:
    """Where a dotted module of the source trees lies, without the .py suffix."""
    parts = module.split(".")
    tree = {package: tree for tree, package in SOURCE_TREES.items()}.get(parts[0], parts[0])
    return os.path.join(ROOT, tree, *parts[1:])


def _module_package(module: str) -> str:
    """The package a dotted module belongs to: itself when it is a package (a folder)."""
    return module if os.path.isdir(_path(module)) else module.rpartition(".")[0]


def test_no_module_imports_another_packages_private_names():
    """A module may import private names (``_x``) and private modules only from its own package:
    across packages only public names, so that a package's internals can change freely."""
    import ast

    bad = []
    for path, package in _source_files():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) + 1 - node.level] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [(module, a.name) for a in node.names]
            else:
                continue
            for module, name in targets:
                owner = _module_package(module)  # `from package import submodule`: the package
                private = any(_private(p) for p in module.split(".")) or (name is not None and _private(name))
                if private and owner != package:
                    bad.append(f"{os.path.relpath(path, ROOT)}:{node.lineno} imports {module}{'.' + name if name else ''}")
    assert not bad, "\n".join(bad)


def test_only_the_engine_flow_builder_imports_the_plugins_package():
    """builders/ -> plugins/ only from builders/trtllm_engine (the engine flow needs the plugin's
    launch table); the other builders stay free of TensorRT-side code."""
    import ast

    bad = []
    for path, package in _source_files():
        if not package.startswith("trtllm_replayssm_builders") or package.startswith(
            "trtllm_replayssm_builders.trtllm_engine"
        ):
            continue
        for node in ast.walk(ast.parse(open(path).read())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "trtllm_replayssm_plugins" for n in names):
                bad.append(f"{os.path.relpath(path, ROOT)}:{node.lineno}")
    assert not bad, "\n".join(bad)
