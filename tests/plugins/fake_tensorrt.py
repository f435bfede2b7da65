"""A stand-in for the parts of ``tensorrt`` / ``tensorrt.plugin`` that the plugin registration
touches, for CPU tests (TensorRT cannot be installed here).

It records the decorated functions and enforces the schema rules TensorRT's ``tensorrt.plugin``
applies to them (read from NVIDIA/TensorRT ``python/packaging/bindings_wheel/tensorrt/plugin/
_validate.py``, 10.9 - 11.1): ``register`` parameters all annotated, tensor descriptors first,
attributes of a serializable built-in type without defaults, return annotation ``TensorDesc``
or ``Tuple[TensorDesc, ...]``; ``aot_impl`` parameters named inputs, attributes, ``outputs``,
``tactic``; ``impl`` parameters named inputs, attributes, ``outputs``, ``stream``.
``trtp.op.<namespace>.<plugin>(*tensors, **attrs)`` runs the registered shape inference on
descriptors of the given :class:`ITensor` stand-ins (dimension -1: dynamic) and returns the
creation callable that :class:`Network` ``.add_plugin`` takes, as TensorRT >= 10.9 does.
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


class ITensor:
    """A network tensor: a TensorRT dtype (the fakes' strings) and a shape (-1: dynamic)."""

    def __init__(self, dtype, shape):
        self.dtype, self.shape = dtype, tuple(shape)


class PluginCall:
    """What ``trtp.op.<ns>.<plugin>(...)`` returns: the inputs, attributes and the outputs the
    registered shape inference gave; callable with ``aot`` as TensorRT's creation callable."""

    def __init__(self, plugin_id, tensors, attrs, outputs):
        self.plugin_id, self.tensors, self.attrs, self.outputs = plugin_id, tensors, attrs, outputs

    def __call__(self, aot=True):
        return self


def from_shape_expr(shape, dtype):
    """``trtp.from_shape_expr``: a descriptor of ``shape`` (ints or a descriptor's ShapeExprs)."""
    d = TensorDesc(dtype, [])
    d.shape_expr = [e if isinstance(e, ShapeExpr) else ShapeExpr(e) for e in shape]
    return d


def _itensor(desc):
    """The ITensor stand-in of an output descriptor (dynamic dimensions -1)."""
    return ITensor(desc.dtype, [e.value if isinstance(e.value, int) else -1 for e in desc.shape_expr])


class Network:
    """``INetworkDefinition.add_plugin`` and ``add_constant`` only: records each call; a plugin
    layer's ``get_output(i)`` is an ITensor of its i-th output descriptor."""

    def __init__(self):
        self.layers = []

    def add_plugin(self, call, aot=True):
        outputs = [_itensor(d) for d in call.outputs]
        layer = types.SimpleNamespace(call=call, aot=aot, name=None, get_output=outputs.__getitem__)
        self.layers.append(layer)
        return layer

    def add_constant(self, shape, weights):
        out = ITensor("INT32" if str(getattr(weights, "dtype", "")) == "int32" else "FLOAT", shape)
        layer = types.SimpleNamespace(shape=tuple(shape), weights=weights, get_output=[out].__getitem__)
        self.layers.append(layer)
        return layer


class _Ops:
    """``trtp.op``: ``trtp.op.<namespace>.<plugin>`` (a namespace is an ``_Ops`` with a name)."""

    def __init__(self, registry, namespace=None):
        self._registry, self._namespace = registry, namespace

    def __getattr__(self, name):
        if self._namespace is None:
            return _Ops(self._registry, name)
        plugin_id = f"{self._namespace}::{name}"

        def call(*tensors, **attrs):
            descs = [TensorDesc(t.dtype, ["dyn" if d < 0 else d for d in t.shape]) for t in tensors]
            return PluginCall(plugin_id, tensors, attrs, self._registry[plugin_id]["register"](*descs, **attrs))

        return call


def _names(fn):
    return list(inspect.signature(fn).parameters)


def make_modules(version="10.9.0", aot=True):
    """(tensorrt, tensorrt.plugin) fakes; ``aot=False`` mimics TensorRT 10.6 - 10.8."""
    trt = types.ModuleType("tensorrt")
    trt.__version__ = version
    trt.float32, trt.bfloat16, trt.float16, trt.int32, trt.int64 = "FLOAT", "BF16", "HALF", "INT32", "INT64"
    trt.fp8 = "FP8"  # tensorrt.fp8 = DataType.FP8 (e4m3)
    trtp = types.ModuleType("tensorrt.plugin")
    trtp.TensorDesc, trtp.SymInt32, trtp.SymIntExprs = TensorDesc, SymInt32, SymIntExprs
    trtp.from_shape_expr = from_shape_expr
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

    trtp.op = _Ops(trtp.registry)
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
