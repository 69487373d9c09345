// AccessPattern geometry and builders.
#include <algorithm>
#include <sstream>

#include "trnsim/isa.h"

namespace trnsim {

uint64_t AccessPattern::free_elems() const {
    uint64_t n = 1;
    for (int k = 0; k < ndim; ++k) n *= size[k];
    return n;
}

uint64_t AccessPattern::contiguous_bytes() const {
    // Walk from the innermost dim outwards while the dims stay dense.
    uint64_t run = 1;
    for (int k = ndim - 1; k >= 0; --k) {
        if (size[k] == 1) continue;
        if (stride[k] != static_cast<int64_t>(run)) break;
        run *= size[k];
    }
    // For HBM the partition dim can continue the run.
    if (space == MemSpace::HBM && partitions > 1 && partition_stride == static_cast<int64_t>(free_elems()) &&
        run == free_elems())
        run *= partitions;
    return run * dtype_size(dtype);
}

static AccessPattern dense_ap(MemSpace space, uint16_t p0, uint16_t np, uint64_t offset, DType dt,
                              std::initializer_list<uint32_t> free_sizes) {
    AccessPattern ap;
    ap.space = space;
    ap.dtype = dt;
    ap.start_partition = p0;
    ap.partitions = np;
    ap.offset = offset;
    if (free_sizes.size() == 0 || free_sizes.size() > kMaxFreeDims)
        throw IsaError("access pattern: 1 to 4 free dims required");
    ap.ndim = static_cast<uint8_t>(free_sizes.size());
    int k = 0;
    for (uint32_t s : free_sizes) ap.size[k++] = s;
    int64_t st = 1;
    for (int d = ap.ndim - 1; d >= 0; --d) {
        ap.stride[d] = st;
        st *= ap.size[d];
    }
    return ap;
}

AccessPattern sbuf_ap(uint16_t p0, uint16_t np, uint64_t offset, DType dt, std::initializer_list<uint32_t> f) {
    return dense_ap(MemSpace::SBUF, p0, np, offset, dt, f);
}

AccessPattern psum_ap(uint16_t p0, uint16_t np, uint64_t offset, DType dt, std::initializer_list<uint32_t> f) {
    return dense_ap(MemSpace::PSUM, p0, np, offset, dt, f);
}

AccessPattern hbm_matrix_ap(uint64_t addr, DType dt, uint32_t rows, uint32_t cols, int64_t ld) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = dt;
    ap.offset = addr;
    ap.partitions = static_cast<uint16_t>(rows);
    if (rows > 0xffff) throw IsaError("hbm_matrix_ap: more than 65535 rows in one access pattern");
    ap.partition_stride = ld;
    ap.ndim = 1;
    ap.size[0] = cols;
    ap.stride[0] = 1;
    return ap;
}

AccessPattern::ByteExtent AccessPattern::byte_extent() const {
    WideInt min_index = 0, max_index = 0;
    auto add_dim = [&](uint64_t n, int64_t step) {
        const WideInt span = static_cast<WideInt>(n == 0 ? 0 : n - 1) * step;
        (span < 0 ? min_index : max_index) += span;
    };
    for (int k = 0; k < ndim && k < kMaxFreeDims; ++k) add_dim(size[k], stride[k]);
    if (space == MemSpace::HBM) add_dim(partitions, partition_stride);
    const WideInt esz = static_cast<WideInt>(dtype_size(dtype));
    const WideInt base = static_cast<WideInt>(offset);
    return {base + min_index * esz, base + (max_index + 1) * esz};
}

bool AccessPattern::may_overlap(const AccessPattern& other) const {
    if (space != other.space) return false;
    if (space != MemSpace::HBM && (start_partition + partitions <= other.start_partition ||
                                   other.start_partition + other.partitions <= start_partition))
        return false;
    const ByteExtent a = byte_extent(), b = other.byte_extent();
    return a.lo < b.hi && b.lo < a.hi;
}

void compute_arg_extents(Program& prog) {
    prog.arg_extent.clear();
    for (const Instruction& ins : prog.instrs) {
        for_each_operand(ins, [&](const OperandInfo&, const AccessPattern& ap) {
            if (ap.space != MemSpace::HBM || ap.arg == 0 || ap.elems() == 0) return;
            const uint64_t end = static_cast<uint64_t>(ap.byte_extent().hi);
            if (prog.arg_extent.size() < ap.arg) prog.arg_extent.resize(ap.arg, 0);
            prog.arg_extent[ap.arg - 1] = std::max(prog.arg_extent[ap.arg - 1], end);
        });
    }
}

std::string format_ap(const AccessPattern& ap) {
    std::ostringstream os;
    os << mem_space_name(ap.space) << "." << dtype_name(ap.dtype);
    if (ap.space == MemSpace::HBM && ap.arg) os << "@arg" << int(ap.arg - 1);
    if (ap.space == MemSpace::HBM) {
        os << "[0x" << std::hex << ap.offset << std::dec << "; " << ap.partitions << ":" << ap.partition_stride;
    } else {
        os << "[p" << ap.start_partition << "+" << ap.partitions << " @" << ap.offset;
    }
    for (int k = 0; k < ap.ndim; ++k) os << ", " << ap.size[k] << ":" << ap.stride[k];
    os << "]";
    return os.str();
}

}  // namespace trnsim
