"""PyTorch's own c10d collective tests (torch.testing._internal.distributed.distributed_test) on
the neuron backend, 2 ranks, in one process group (tests/python/distributed/workers/torch_c10d_suite.py).

The tests chosen are those that apply to a custom backend on device tensors: each collective's
``*_cuda`` test, with ``.cuda()`` meaning neuron (trnsim.cuda_compat), except those that need more
than 2 ranks (the group tests) and the sparse all-reduce (gloo's alone); the coalescing manager; and
DDP with SyncBatchNorm (every input layout, fp16) and with a GradScaler. The others of that suite test
CPU tensors (gloo's business), NCCL internals or CUDA itself."""

import re

from dist_launch import torchrun

TESTS = ["test_broadcast_cuda", "test_reduce_sum_cuda", "test_reduce_sum_cuda_twice", "test_reduce_scatter_v_cuda",
         "test_reduce_scatter_tensor_cuda", "test_all_reduce_sum_cuda", "test_all_reduce_sum_cuda_async",
         "test_all_reduce_sum_cuda_complex", "test_scatter_cuda", "test_scatter_cuda_complex", "test_gather_cuda",
         "test_all_gather_cuda", "test_all_gather_cuda_complex", "test_all_gather_v_cuda",
         "test_all_gather_into_cat_tensor_cuda", "test_all_gather_into_stack_tensor_cuda",
         "test_all_to_all_single_equal_split_cuda", "test_all_to_all_single_equal_split_cuda_complex",
         "test_all_to_all_single_unequal_split_cuda", "test_all_to_all_single_unequal_split_cuda_complex",
         "test_all_to_all_cuda", "test_all_to_all_cuda_complex", "test_all_to_all_single_equal_split_full_group_cuda",
         "test_all_to_all_single_unequal_split_full_group_cuda", "test_all_to_all_full_group_cuda",
         "test_barrier_cuda", "test_coalescing_manager", "test_coalescing_manager_async",
         "test_DistributedDataParallel_with_amp_and_grad_is_view", "test_DistributedDataParallel_SyncBatchNorm",
         "test_DistributedDataParallel_SyncBatchNorm_No_Affine", "test_DistributedDataParallel_SyncBatchNorm_2D_Input",
         "test_DistributedDataParallel_SyncBatchNorm_Single_Input_Per_Process",
         "test_DistributedDataParallel_SyncBatchNorm_Diff_Input_Sizes_Running_Value",
         "test_DistributedDataParallel_SyncBatchNorm_Diff_Input_Sizes_gradient",
         "test_DistributedDataParallel_SyncBatchNorm_Channels_Last", "test_DistributedDataParallel_SyncBatchNorm_half"]


def test_pytorch_c10d_collective_tests_pass_on_the_neuron_backend(tmp_path):
    r = torchrun("torch_c10d_suite.py", *TESTS, BACKEND="nccl", TRNSIM_CUDA_COMPAT=1, TEMP_DIR=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and out.count("DONE") == 2, out[-6000:]
    results = re.findall(r"RESULT (\S+) (\S+) ?(.*)", r.stdout)
    by_test = {}
    for name, status, detail in results:
        by_test.setdefault(name, []).append((status, detail))
    assert sorted(by_test) == sorted(TESTS), sorted(by_test)
    failed = {name: got for name, got in by_test.items() if any(status != "pass" for status, _ in got)}
    assert not failed, failed
