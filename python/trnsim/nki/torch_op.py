"""NKI kernels as PyTorch custom operators, with autograd from a backward kernel (as TorchNeuron's
nki_op registers them): usable eagerly on CPU or neuron tensors and inside torch.compile graphs,
where the operator's output shapes come from tracing the kernel on shapes alone."""

from __future__ import annotations

import inspect

from trnsim.nki import torch_bridge
from trnsim.nki.runtime import _as_kernel, spec
from trnsim.nki.tensor import NkiTensor


def _output_specs(kernel, tensors, chip) -> list:
    """(shape, torch dtype) of each output, from a trace on the inputs' shapes (no values)."""
    args = [spec(tuple(t.shape), torch_bridge.numpy_dtype(t.dtype)) for t in tensors]
    returned = kernel.trace(*args, chip=chip).returned
    outs = returned if isinstance(returned, (tuple, list)) else (returned,)
    if not all(isinstance(o, NkiTensor) for o in outs):
        raise TypeError(f"{kernel.__name__} must return its HBM output tensors")
    return [(tuple(o.shape), torch_bridge.torch_dtype(o.dtype)) for o in outs]


def _register(name: str, kernel, n_out: int, chip):
    import torch
    n_in = len(inspect.signature(kernel.fn).parameters)
    params = ", ".join(f"Tensor x{i}" for i in range(n_in))
    result = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"

    def impl(*tensors):
        out = kernel(*tensors, chip=chip) if chip else kernel(*tensors)
        return tuple(out) if n_out > 1 else out

    op = torch.library.custom_op(name, impl, mutates_args=(), schema=f"({params}) -> {result}")
    cache: dict = {}

    def fake(*tensors):
        key = tuple((tuple(t.shape), t.dtype) for t in tensors)
        if key not in cache:
            cache[key] = _output_specs(kernel, tensors, chip or "trn2")
        outs = [torch.empty(shape, dtype=dt, device=tensors[0].device) for shape, dt in cache[key]]
        return tuple(outs) if n_out > 1 else outs[0]

    op.register_fake(fake)
    return op, n_in


def torch_op(name: str, forward, backward=None, *, outputs: int = 1, chip: str | None = None):
    """Registers the NKI kernel `forward` as the PyTorch operator `name` ("namespace::op") taking its
    tensor parameters and returning `outputs` tensors. With `backward`, a kernel taking the forward's
    inputs and then the gradients of its outputs and returning one gradient per input, the operator
    is differentiable (the backward runs as the operator `name + "_backward"`). Returns the
    operator: call it like a function, in eager code or under torch.compile."""
    fwd = _as_kernel(forward)
    op, n_in = _register(name, fwd, outputs, chip)
    if backward is not None:
        bwd_op, _ = _register(name + "_backward", _as_kernel(backward), n_in, chip)

        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        def grad(ctx, *grads):
            result = bwd_op(*ctx.saved_tensors, *grads)
            return tuple(result) if n_in > 1 else result

        op.register_autograd(grad, setup_context=setup_context)
    return op
