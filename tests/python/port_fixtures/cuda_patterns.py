"""Every pattern `trnsim port-check` reports, and look-alikes it must not (never run).

Each line that should be reported ends with `# expect: CODE@text [CODE@text ...]`: a finding of
CODE whose column is where `text` first starts on that line. Lines without a marker must have no
finding. Comments and docstrings that mention torch.cuda.synchronize() or "cuda" are not code.
"""
# torch.cuda.is_available() in a comment is not code
import os
import torch
import torch as th
import torch.distributed as dist
import torch.utils.cpp_extension
from torch import cuda
from torch.cuda import amp as cuda_amp
from torch.cuda.amp import autocast, GradScaler, custom_fwd
from torch.cuda import synchronize as sync
from torch.utils.cpp_extension import CUDAExtension, load_inline
from numba import cuda as numba_cuda  # expect: CU403@cuda
import triton  # expect: CU403@triton
import triton.language as tl  # expect: CU403@triton.language
import apex  # expect: CU403@apex
from flash_attn import flash_attn_func  # expect: CU403@from
from xformers.ops import memory_efficient_attention  # expect: CU403@from
import bitsandbytes as bnb  # expect: CU403@bitsandbytes
try:
    import flash_attn  # expect: CU403@flash_attn
except ImportError:
    flash_attn = None

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # expect: CU202@"cuda" CU101@torch.cuda.is_available
N = torch.cuda.device_count()  # expect: CU101@torch
torch.cuda.init()  # expect: CU101@torch
ready = th.cuda.is_initialized()  # expect: CU101@th.cuda
print("cuda")
names = {"cuda": 1, "cpu": 0}
choices = ["cuda", "cpu"]
has = hasattr(torch, "cuda")
doc = "moves the model to cuda:0 first"
label = "cuda"


def train(model, data, device="cuda:0", backend="nccl", rank=0):  # expect: CU202@"cuda:0" CU303@"nccl"
    """Docstring: call torch.cuda.synchronize() and .cuda() here, with device="cuda"."""
    torch.cuda.set_device(rank)  # expect: CU102@torch
    index = torch.cuda.current_device()  # expect: CU102@torch
    with torch.cuda.device(1):  # expect: CU102@torch
        pass
    sync()  # expect: CU102@sync
    cuda.synchronize()  # expect: CU102@cuda
    model = model.cuda()  # expect: CU201@cuda()
    model = model.cuda(rank)  # expect: CU201@cuda(
    batch = data.cuda(non_blocking=True)  # expect: CU201@cuda(
    pair = data.cuda(0, True)  # expect: CU201@cuda(
    batch = batch.to("cuda", non_blocking=True)  # expect: CU202@"cuda"
    batch = batch.to(device="cuda:1")  # expect: CU202@"cuda:1"
    ones = torch.ones(3, device=f"cuda:{rank}")  # expect: CU202@f"cuda
    dev = torch.device("cuda", rank)  # expect: CU202@"cuda"
    other = torch.device("cuda:%d" % rank)  # expect: CU202@"cuda:%d"
    fmt = torch.device("cuda:{}".format(rank))  # expect: CU202@"cuda:{}"
    state = torch.load("ckpt.pt", map_location="cuda")  # expect: CU202@"cuda"
    gen = torch.Generator("cuda")  # expect: CU202@"cuda"
    config = {"device": "cuda"}  # expect: CU202@"cuda"
    self_device: str = "cuda"  # expect: CU202@"cuda"
    with torch.autocast("cuda", dtype=torch.bfloat16):  # expect: CU202@"cuda"
        pass
    with torch.autocast(device_type="cuda"):  # expect: CU202@"cuda"
        pass
    if batch.device.type == "cuda":  # expect: CU203@"cuda"
        pass
    if "cuda" in str(batch.device):  # expect: CU203@"cuda"
        pass
    if dev.type in ("cuda", "xpu"):  # expect: CU203@"cuda"
        pass
    if batch.is_cuda:  # expect: CU203@is_cuda
        pass
    if str(device).startswith("cuda"):  # expect: CU203@"cuda"
        pass
    if backend == "nccl" or label == "cuda":
        pass
    pinned = batch.pin_memory("cuda")  # expect: CU204@"cuda"
    loader = torch.utils.data.DataLoader(data, pin_memory=True, pin_memory_device="cuda")  # expect: CU204@"cuda"
    print(torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_reserved(0))  # expect: CU103@torch.cuda.memory_allocated CU103@torch.cuda.max_memory_reserved
    torch.cuda.empty_cache()  # expect: CU103@torch
    free, total = torch.cuda.mem_get_info()  # expect: CU103@torch
    torch.cuda.reset_peak_memory_stats()  # expect: CU103@torch
    stats = torch.cuda.memory.memory_stats()  # expect: CU103@torch
    summary = torch.cuda.memory_summary()  # expect: CU103@torch
    torch.cuda.manual_seed(0)  # expect: CU104@torch
    torch.cuda.manual_seed_all(0)  # expect: CU104@torch
    rng = torch.cuda.get_rng_state()  # expect: CU104@torch
    torch.cuda.set_rng_state(rng)  # expect: CU104@torch
    name = torch.cuda.get_device_name(0)  # expect: CU105@torch
    memory = torch.cuda.get_device_properties(0).total_memory  # expect: CU105@torch
    major, minor = torch.cuda.get_device_capability()  # expect: CU105@torch
    bf16 = torch.cuda.is_bf16_supported()  # expect: CU105@torch
    stream = torch.cuda.Stream()  # expect: CU106@torch
    with torch.cuda.stream(stream):  # expect: CU106@torch
        pass
    start = torch.cuda.Event(enable_timing=True)  # expect: CU106@torch
    current = torch.cuda.current_stream()  # expect: CU106@torch
    default = torch.cuda.default_stream()  # expect: CU106@torch
    with torch.cuda.amp.autocast(dtype=torch.float16):  # expect: CU107@torch
        pass
    with autocast(enabled=True):  # expect: CU107@autocast
        pass
    with torch.cuda.amp.autocast(True):  # expect: CU107@torch
        pass
    scaler = GradScaler()  # expect: CU107@GradScaler
    scaler2 = torch.cuda.amp.GradScaler(init_scale=1024)  # expect: CU107@torch
    scaler3 = cuda_amp.GradScaler()  # expect: CU107@cuda_amp
    scaler_class = torch.cuda.amp.GradScaler  # expect: CU107@torch
    graph = torch.cuda.CUDAGraph()  # expect: CU108@torch
    with torch.cuda.graph(graph):  # expect: CU108@torch
        pass
    step = torch.cuda.make_graphed_callables(model, (batch,))  # expect: CU108@torch
    torch.cuda.nvtx.range_push("step")  # expect: CU109@torch
    torch.cuda.nvtx.range_pop()  # expect: CU109@torch
    with torch.cuda.nvtx.range("fwd"):  # expect: CU109@torch
        pass
    ids = torch.cuda.LongTensor([1, 2])  # expect: CU110@torch
    torch.set_default_tensor_type(torch.cuda.FloatTensor)  # expect: CU110@torch.cuda
    try:
        pass
    except torch.cuda.OutOfMemoryError:  # expect: CU111@torch
        pass
    module = torch.cuda  # expect: CU111@torch
    torch.cuda.ipc_collect()  # expect: CU111@torch
    if torch.version.cuda is not None:  # expect: CU120@torch
        pass
    built = torch.backends.cuda.is_built()  # expect: CU120@torch
    torch.backends.cudnn.benchmark = True  # expect: CU301@torch
    torch.backends.cudnn.deterministic = True  # expect: CU301@torch
    torch.backends.cuda.matmul.allow_tf32 = True  # expect: CU302@torch
    dist.init_process_group("nccl")  # expect: CU303@"nccl"
    dist.init_process_group(backend="nccl", rank=rank)  # expect: CU303@"nccl"
    group = dist.new_group([0, 1], backend="nccl")  # expect: CU303@"nccl"
    mixed = dist.init_process_group("cpu:gloo,cuda:nccl")  # expect: CU303@"cpu:gloo
    ext = CUDAExtension("k", ["k.cpp", "k_kernel.cu"])  # expect: CU401@CUDAExtension
    mod = load_inline("k", cpp_sources="", cuda_sources="__global__ void k() {}")  # expect: CU401@load_inline
    mod2 = torch.utils.cpp_extension.load("k", sources=["k.cpp", "k.cu"])  # expect: CU401@torch
    cpu_only = torch.utils.cpp_extension.load("k", sources=["k.cpp"])
    fast = torch.compile(model, mode="reduce-overhead")  # expect: CU404@"reduce-overhead"
    fast2 = torch.compile(model, backend="inductor")  # expect: CU404@"inductor"
    ok = torch.compile(model, backend="neuron")
    numba_cuda.jit(lambda: None)
    torch.accelerator.synchronize()
    batch.to("cpu")
    batch.to(device)
    quiet = torch.cuda.synchronize()  # port-check: ignore
    partly = model.cuda(device="cuda")  # port-check: ignore[CU202]  # expect: CU201@cuda(
    café = "é"; torch.cuda.synchronize()  # expect: CU102@torch
    return model


@triton.jit  # expect: CU402@triton.jit
def add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.autotune(configs=[], key=["n"])  # expect: CU402@triton.autotune
@triton.jit  # expect: CU402@triton.jit
def tuned_kernel(x_ptr, n):
    pass


@torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)  # expect: CU107@torch
def forward(ctx, x):
    return x


@custom_fwd  # expect: CU107@custom_fwd
def forward2(ctx, x):
    return x


@torch.cuda.amp.custom_bwd  # expect: CU107@torch
def backward(ctx, grad):
    return grad


def setup(parser):
    parser.add_argument("--device", default="cuda")  # expect: CU202@"cuda"
    parser.add_argument("--mode", default="cuda")
    os.environ["CUDA_VISIBLE_DEVICES"] = "0"
