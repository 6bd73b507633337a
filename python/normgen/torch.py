"""normgen's kernels from PyTorch: operators, autograd and modules.

    import normgen.torch
    lib = normgen.torch.load()              # or load(DIR): the folder holding libnormgen_torch.so
    norm = lib.rms_norm(4096)               # an nn.Module: weight = ones(4096)
    y = norm(x)                             # forward by the generated kernel, backward by the
    y.sum().backward()                      # generated backward kernel (`normgen grad`)
    y, = torch.ops.normgen.rms_norm(x, w)   # the raw operator (no autograd)

The operators (python/normgen_torch_ops.cpp) are torch.ops.normgen.<layer> for every forward layer of
the library and torch.ops.normgen.<layer>_backward for its backward. Here:

- lib.functional.<layer>(*tensors, **consts): the operator with autograd. Its backward calls the
  backward operator with what the backward declaration reads: the forward's inputs and parameters,
  the saved statistics (the forward then runs with saved=True) and d_<out> for every output.
  Outputs that `update` an input (BatchNorm's running statistics) are written in place, carry no
  gradient and are not returned.
- lib.<layer>(*sizes, **consts): an nn.Module. Its parameters are the declaration's params, sized
  by the extents of their axes (given positionally, in the order the params name them, or by axis
  name); inputs an output updates are buffers (running statistics: zeros, or ones for a name with
  "var"). Initialized as the usual modules are: a parameter named bias, beta or shift is zeros,
  alpha 0.5 (DyT's alpha_0), any other ones. forward() takes the remaining inputs in declaration
  order.

The constants of a declaration are compiled into its kernels: a keyword with another value is
refused (ValueError), declare a variant instead.
"""

import json
import os

import torch

__all__ = ["load", "Library"]

_loaded = {}


def _default_path():
    p = os.environ.get("NORMGEN_TORCH_OPS")
    if not p:
        raise RuntimeError("normgen.torch.load(): give the folder of libnormgen_torch.so (or set NORMGEN_TORCH_OPS)")
    return p


def load(path=None):
    """Loads the operator library at `path`: a .so, or a folder holding libnormgen_torch.so (the
    catalog's, <build>/python) or exactly one lib<name>.so (`normgen torch -o DIR`)."""
    path = path or _default_path()
    if os.path.isdir(path):
        libs = sorted(f for f in os.listdir(path) if f.startswith("lib") and f.endswith(".so"))
        if "libnormgen_torch.so" in libs:
            libs = ["libnormgen_torch.so"]
        if len(libs) != 1:
            raise FileNotFoundError(f"normgen.torch.load(): {path} holds {len(libs)} operator libraries ({', '.join(libs) or 'none'}); give the .so")
        path = os.path.join(path, libs[0])
    if not os.path.exists(path):
        raise FileNotFoundError(f"normgen.torch.load(): no operator library at {path}")
    path = os.path.realpath(path)
    if path not in _loaded:
        torch.ops.load_library(path)
        stem = os.path.basename(path)
        stem = stem[3:] if stem.startswith("lib") else stem
        stem = stem.split(".so")[0]
        _loaded[path] = Library(json.loads(getattr(torch.ops.normgen, "_layers_" + stem)()), stem)
    return _loaded[path]


class _Layer:
    """One declaration's operator, with autograd through its backward operator."""

    def __init__(self, name, info):
        self.name = name
        self.info = info
        self.op = getattr(torch.ops.normgen, info["op"])
        self.tensors = [t["name"] for t in info["tensors"]]
        self.updated = {o["updates"] for o in info["outputs"] if o["updates"]}
        # Tensors whose storage type is the call's (they share a storage group with the first
        # input); the others are f32.
        self.follows = {t["name"] for t in info["tensors"] if t.get("follows_dtype")}
        # The outputs the caller gets: neither optional nor updating an input.
        self.returned = [o["name"] for o in info["outputs"] if not o["optional"] and not o["updates"]]
        self.optional = [o["name"] for o in info["outputs"] if o["optional"] and not o["updates"]]
        self.backward = info.get("backward")
        if self.backward:
            self.backward_op = getattr(torch.ops.normgen, self.backward["op"])
            reads = {t["name"] for t in self.backward["tensors"]}
            self.needs_saved = any(o in reads for o in self.optional)
        else:
            self.needs_saved = False

    def __call__(self, *tensors, **consts):
        if len(tensors) != len(self.tensors):
            raise TypeError(f"normgen.{self.name}() takes {len(self.tensors)} tensors ({', '.join(self.tensors)}), got {len(tensors)}")
        unknown = set(consts) - set(self.info["consts"])
        if unknown:
            raise TypeError(f"normgen.{self.name}() got unknown keyword(s) {sorted(unknown)} (its consts: {sorted(self.info['consts'])})")
        wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors if isinstance(t, torch.Tensor))
        if not wants_grad:
            out = self.op(*tensors, **consts)
            return out[0] if len(out) == 1 else tuple(out)
        if not self.backward:
            raise RuntimeError(f"normgen.{self.name}: the library has no backward kernel (build it with GRAD ON)")
        out = _Function.apply(self, consts, *tensors)
        return out[0] if len(out) == 1 else out


class _Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layer, consts, *tensors):
        out = layer.op(*tensors, saved=layer.needs_saved, **consts)
        n = len(layer.returned)
        returned, saved = list(out[:n]), list(out[n:])
        ctx.layer = layer
        ctx.save_for_backward(*tensors, *returned, *saved)
        ctx.n_inputs = len(tensors)
        ctx.n_returned = n
        # Inputs an output updates (running statistics) were written in place: they take no
        # gradient, and are saved above after the write, so autograd's version check holds.
        return tuple(returned)

    @staticmethod
    def backward(ctx, *grads):
        layer = ctx.layer
        values = ctx.saved_tensors
        tensors = values[: ctx.n_inputs]
        returned = values[ctx.n_inputs : ctx.n_inputs + ctx.n_returned]
        saved = values[ctx.n_inputs + ctx.n_returned :]
        by_name = dict(zip(layer.tensors, tensors))
        by_name.update(zip(layer.optional, saved))
        for name, out, g in zip(layer.returned, returned, grads):
            by_name["d_" + name] = (g if g is not None else torch.zeros_like(out)).to(out.dtype).contiguous()
        args = []
        for t in layer.backward["tensors"]:
            if t["name"] not in by_name:
                raise RuntimeError(f"normgen.{layer.name}: the backward reads '{t['name']}', which the forward does not give")
            args.append(by_name[t["name"]])
        outs = layer.backward_op(*args)
        grads_in = {o["name"]: g for o, g in zip(layer.backward["outputs"], outs)}
        result = [None, None]
        for name, t in zip(layer.tensors, tensors):
            g = grads_in.get("d_" + name)
            if g is None and ("d_%s_0" % name) in grads_in:
                # An indexed parameter (PolyNorm's weight[0], weight[1], ...): one gradient per element.
                parts, i = [], 0
                while ("d_%s_%d" % (name, i)) in grads_in:
                    parts.append(grads_in["d_%s_%d" % (name, i)])
                    i += 1
                g = torch.stack(parts).reshape(t.shape)
            result.append(None if g is None or not t.requires_grad else g.to(t.dtype))
        return tuple(result)


def _init_value(name):
    if name in ("bias", "beta", "shift"):
        return 0.0
    if name == "alpha":
        return 0.5
    return 1.0


class _Module(torch.nn.Module):
    def __init__(self, layer, sizes, consts):
        super().__init__()
        self._layer = layer
        self._consts = consts
        info = layer.info
        self._inputs = []
        for t in info["tensors"]:
            name = t["name"]
            if t["role"] == "param" or name in layer.updated:
                shape = [sizes[d] for d in t["dims"]]
                if t["role"] == "param":
                    self.register_parameter(name, torch.nn.Parameter(torch.full(shape, _init_value(name))))
                else:
                    self.register_buffer(name, torch.ones(shape) if "var" in name else torch.zeros(shape))
            else:
                self._inputs.append(name)

    def forward(self, *inputs):
        if len(inputs) != len(self._inputs):
            raise TypeError(f"{self._layer.name}.forward() takes {len(self._inputs)} tensors ({', '.join(self._inputs)}), got {len(inputs)}")
        given = dict(zip(self._inputs, inputs))
        tensors = []
        for name in self._layer.tensors:
            if name in given:
                tensors.append(given[name])
            else:
                t = getattr(self, name)
                # A parameter in the activations' storage group (Gemma's weight) takes their dtype;
                # the others stay f32, as the kernels store them.
                if name in self._layer.follows and inputs:
                    t = t.to(inputs[0].dtype)
                tensors.append(t)
        return self._layer(*tensors, **self._consts)

    def extra_repr(self):
        return self._layer.name


class Library:
    """The layers of one operator library (load())."""

    def __init__(self, layers, stem):
        self.layers = {name: _Layer(name, info) for name, info in layers.items()}
        self._kernel_seconds = getattr(torch.ops.normgen, "_kernel_seconds_" + stem)
        self.functional = type("functional", (), {})()
        for name, layer in self.layers.items():
            setattr(self.functional, name, layer)
            setattr(self, name, self._module_factory(layer))

    def kernel_seconds(self, op, tensors, saved=False, reps=100):
        """Median seconds of run_kernel alone (the C++ API: no dispatcher, outputs allocated once)
        for operator `op` on `tensors`, `reps` calls a round: the benchmark's measure of the binding."""
        return self._kernel_seconds(op, list(tensors), saved, reps)

    def _module_factory(self, layer):
        info = layer.info
        axes = []
        for t in info["tensors"]:
            if t["role"] == "param" or t["name"] in layer.updated:
                for d in t["dims"]:
                    if d not in axes:
                        axes.append(d)

        def make(*sizes, **kwargs):
            consts = {k: kwargs.pop(k) for k in list(kwargs) if k in info["consts"]}
            given = dict(zip(axes, sizes))
            if len(sizes) > len(axes):
                raise TypeError(f"normgen.{layer.name}(): takes the sizes of {axes}, got {len(sizes)}")
            for k, v in kwargs.items():
                if k not in axes:
                    raise TypeError(f"normgen.{layer.name}(): unknown argument '{k}' (sizes of {axes}, consts {sorted(info['consts'])})")
                given[k] = v
            missing = [a for a in axes if a not in given]
            if missing:
                raise TypeError(f"normgen.{layer.name}(): give the size of {missing}")
            return _Module(layer, given, consts)

        make.__name__ = layer.name
        make.__doc__ = f"nn.Module of {layer.name}; sizes of {axes}"
        return make
