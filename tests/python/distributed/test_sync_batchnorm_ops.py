"""SyncBatchNorm's ATen ops on neuron tensors (trnsim.distributed.sync_batchnorm), on one device:
statistics, normalisation and gradients equal batch norm's over the same batch, running
statistics updated with the unbiased variance, channels-last kept."""

import torch

import trnsim.distributed  # noqa: F401  (registers the ops with the backend)
from trnsim.distributed import sync_batchnorm


def test_forward_and_backward_equal_batch_norm_on_the_whole_batch():
    sync_batchnorm.register()
    g = torch.Generator().manual_seed(0)
    x, dy = torch.randn(4, 3, 5, 2, generator=g), torch.randn(4, 3, 5, 2, generator=g)
    w, b = torch.randn(3, generator=g), torch.randn(3, generator=g)
    xr, wr, br = (t.clone().requires_grad_() for t in (x, w, b))
    torch.nn.functional.batch_norm(xr, None, None, wr, br, training=True, eps=1e-5).backward(dy)
    ref = torch.nn.functional.batch_norm(x, None, None, w, b, training=True, eps=1e-5)

    dev = "neuron"
    xd, dyd, wd, bd = (t.to(dev) for t in (x, dy, w, b))
    # two "ranks" holding halves of the batch, combined as SyncBatchNorm combines them
    halves = [torch.batch_norm_stats(h, 1e-5) for h in xd.chunk(2)]
    means, invstds = torch.stack([m for m, _ in halves]), torch.stack([i for _, i in halves])
    counts = torch.tensor([2 * 5 * 2] * 2, dtype=torch.float32, device=dev)
    running_mean, running_var = torch.zeros(3, device=dev), torch.ones(3, device=dev)
    mean, invstd = torch.batch_norm_gather_stats_with_counts(xd, means, invstds, running_mean, running_var, 0.1,
                                                             1e-5, counts)
    y = torch.batch_norm_elemt(xd, wd, bd, mean, invstd, 1e-5)
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(running_var.cpu(), 0.9 + 0.1 * x.var((0, 2, 3)), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(running_mean.cpu(), 0.1 * x.mean((0, 2, 3)), rtol=1e-5, atol=1e-6)

    sum_dy, sum_dy_xmu, grad_w, grad_b = torch.batch_norm_backward_reduce(dyd, xd, mean, invstd, wd, True, True, True)
    dx = torch.batch_norm_backward_elemt(dyd, xd, mean, invstd, wd, sum_dy, sum_dy_xmu, counts.int())
    torch.testing.assert_close(dx.cpu(), xr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad_w.cpu(), wr.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad_b.cpu(), br.grad, rtol=1e-4, atol=1e-5)

    last = xd.contiguous(memory_format=torch.channels_last)
    assert torch.batch_norm_elemt(last, wd, bd, mean, invstd, 1e-5).is_contiguous(memory_format=torch.channels_last)
