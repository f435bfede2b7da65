"""A stand-in for the parts of ``tensorrt`` / ``tensorrt.plugin`` that the plugin registration
touches, for CPU tests (TensorRT cannot be installed here).

It records the decorated functions and enforces the schema rules TensorRT's ``tensorrt.plugin``
applies to them (read from NVIDIA/TensorRT ``python/packaging/bindings_wheel/tensorrt/plugin/
_validate.py``, 10.9 - 11.1): ``register`` parameters all annotated, tensor descriptors first,
attributes of a serializable built-in type without defaults, return annotation ``TensorDesc``
or ``Tuple[TensorDesc, ...]``; ``aot_impl`` parameters named inputs, attributes, ``outputs``,
``tactic``; ``impl`` parameters named inputs, attributes, ``outputs``, ``stream``.
It is not TensorRT: what it cannot show (engine build, PTX loading, aliasing at run time) is
checked on a machine with TensorRT by ``examples/trt_engine_mamba2.py``.
"""

import inspect
import sys
import types
import typing


class ShapeExpr:
    """A dimension: constant (int), dynamic (symbol name) or fake (output-dtype pass)."""

    def __init__(self, value=None, fake=False):
        self.value, self.is_fake = value, fake

    @property
    def is_constant(self):
        if self.is_fake:
            raise RuntimeError("fake ShapeExpr")
        return isinstance(self.value, int)

    def constant_value(self):
        if not self.is_constant:
            raise RuntimeError("not constant")
        return self.value


class TensorDesc:
    def __init__(self, dtype, dims, fake=False):
        self.dtype = dtype
        self.shape_expr = [ShapeExpr(None, True) if fake else ShapeExpr(d) for d in dims]
        self.aliased_to = None
        self.like_of = None

    @property
    def ndim(self):
        return len(self.shape_expr)

    def like(self):
        d = TensorDesc(self.dtype, [])
        d.shape_expr, d.like_of = list(self.shape_expr), self
        return d

    def aliased(self):
        d = self.like()
        d.aliased_to = self
        return d


class SymInt32:
    def __init__(self, value):
        self.value = value.value if isinstance(value, SymInt32) else value


class SymIntExprs(list):
    @classmethod
    def from_tuple(cls, exprs):
        return cls(exprs)


class KernelLaunchParams:
    grid_x = grid_y = grid_z = block_x = block_y = block_z = 1
    shared_mem = 0


_SERIALIZABLE = (int, float, str, bool, bytes)


def _names(fn):
    return list(inspect.signature(fn).parameters)


def make_modules(version="10.9.0", aot=True):
    """(tensorrt, tensorrt.plugin) fakes; ``aot=False`` mimics TensorRT 10.6 - 10.8."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.float32, trt.bfloat16, trt.float16, trt.int32, trt.int64 = "FLOAT", "BF16", "HALF", "INT32", "INT64"
    trtp = types.ModuleType("tensorrt.plugin")
    trtp.TensorDesc, trtp.SymInt32, trtp.SymIntExprs = TensorDesc, SymInt32, SymIntExprs
    trtp.registry = {}
    trt.plugin = trtp

    def register(plugin_id):
        def deco(fn):
            sig = inspect.signature(fn)
            inputs, attrs, seen_attr = [], [], False
            for name, p in sig.parameters.items():
                if p.annotation is inspect.Parameter.empty:
                    raise ValueError(f"{name} has no annotation")
                if p.default is not inspect.Parameter.empty:
                    raise ValueError(f"{name} has a default")
                if p.annotation is TensorDesc:
                    if seen_attr:
                        raise ValueError("tensor descriptors and attributes interspersed")
                    inputs.append(name)
                elif p.annotation in _SERIALIZABLE:
                    seen_attr = True
                    attrs.append(name)
                else:
                    raise ValueError(f"{name}: unsupported annotation {p.annotation}")
            ret = sig.return_annotation
            if typing.get_origin(ret) is tuple:
                assert all(a is TensorDesc for a in typing.get_args(ret))
                n_out = len(typing.get_args(ret))
            elif ret is TensorDesc:
                n_out = 1
            else:
                raise ValueError(f"return annotation {ret}")
            trtp.registry[plugin_id] = dict(register=fn, inputs=inputs, attrs=attrs, num_outputs=n_out)
            return fn

        return deco

    def _impl_decorator(kind, tail):
        def decorator(plugin_id):
            def deco(fn):
                d = trtp.registry[plugin_id]
                names = _names(fn)
                used = [n for n in names if n in d["attrs"]]
                expected = d["inputs"] + [n for n in d["attrs"] if n in used] + tail
                if names != expected and not (kind == "impl" and names == expected + ["tactic"]):
                    raise ValueError(f"{kind} signature {names} != {expected}")
                d[kind] = fn
                return fn

            return deco

        return decorator

    trtp.register = register
    trtp.impl = _impl_decorator("impl", ["outputs", "stream"])
    if aot:
        trtp.aot_impl = _impl_decorator("aot_impl", ["outputs", "tactic"])
        trtp.KernelLaunchParams = KernelLaunchParams
    return trt, trtp


def install(monkeypatch, **kw):
    trt, trtp = make_modules(**kw)
    monkeypatch.setitem(sys.modules, "tensorrt", trt)
    monkeypatch.setitem(sys.modules, "tensorrt.plugin", trtp)
    return trt, trtp
