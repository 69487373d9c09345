// CoreMemory: HBM, SBUF and PSUM of one NeuronCore, and the access-pattern
// gather/scatter/copy that every instruction's functional semantics uses.
//
// An access pattern is resolved once per call: the whole footprint is checked
// against the memory's bounds, then the view is normalised to byte steps with
// size-1 dims dropped and dims that continue each other merged (a dense
// [128, 4, 128] SBUF tile becomes 128 rows of 512 elements; a dense HBM matrix
// becomes one row). Work then proceeds row by row with bulk conversions.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "trnsim/sim.h"

namespace trnsim {

namespace {

constexpr size_t kChunkElems = 4096;   // elements converted per step through scratch buffers

// Host bytes between SBUF partitions: one cache line more than a partition holds. With the exact
// partition size (a multiple of 64 KiB) every partition's row would map to the same host cache
// set, and an instruction touching one element in each of 64 partitions would evict itself.
uint64_t sbuf_pitch(const ChipConfig& chip) { return chip.sbuf.bytes_per_partition + 64; }

// An access pattern as byte steps over up to five dims (partition + 4 free),
// outermost first; the last dim is the row walked with bulk conversions.
struct ResolvedAp {
    uint8_t* base = nullptr;           // element (0, 0, ...)
    DType dtype = DType::f32;
    int64_t elem_size = 4;
    int outer_dims = 0;                // dims before the row
    std::array<uint64_t, kMaxFreeDims> outer_size{};
    std::array<int64_t, kMaxFreeDims> outer_step{};
    uint64_t row_len = 0;              // 0: the pattern has no elements
    int64_t row_step = 0;              // bytes between elements of a row
    uint64_t rows = 0;
};

// Lowest and highest element offset (in elements) reached by the free dims.
void free_extent(const AccessPattern& ap, __int128& lo, __int128& hi) {
    lo = hi = 0;
    for (int k = 0; k < ap.ndim; ++k) {
        __int128 reach = static_cast<__int128>(ap.size[k] - 1) * ap.stride[k];
        (reach < 0 ? lo : hi) += reach;
    }
}

[[noreturn]] void out_of_range(const AccessPattern& ap, const std::string& why) {
    throw std::out_of_range(std::string(mem_space_name(ap.space)) + " access out of range: " + format_ap(ap) +
                            ": " + why);
}

std::string span_text(__int128 lo, __int128 hi) {
    return "bytes [" + std::to_string(static_cast<long long>(lo)) + ", " + std::to_string(static_cast<long long>(hi)) +
           ")";
}

// Bounds-checks the whole footprint of 'ap' and resolves it to byte steps.
ResolvedAp resolve(CoreMemory& mem, const AccessPattern& ap) {
    ResolvedAp r;
    r.dtype = ap.dtype;
    r.elem_size = static_cast<int64_t>(dtype_size(ap.dtype));
    if (ap.ndim < 1 || ap.ndim > kMaxFreeDims)
        throw std::invalid_argument("access pattern " + format_ap(ap) + ": 1 to 4 free dims required");
    if (ap.elems() == 0) return r;

    const int64_t es = r.elem_size;
    __int128 lo, hi;
    free_extent(ap, lo, hi);
    int64_t partition_step;
    if (ap.space == MemSpace::HBM) {
        if (!mem.backed()) throw std::logic_error("timing-only mode: HBM holds no data");
        __int128 p_reach = static_cast<__int128>(ap.partitions - 1) * ap.partition_stride;
        __int128 first = static_cast<__int128>(ap.offset) + (lo + std::min<__int128>(p_reach, 0)) * es;
        __int128 end = static_cast<__int128>(ap.offset) + (hi + std::max<__int128>(p_reach, 0) + 1) * es;
        if (first < 0 || end > static_cast<__int128>(mem.hbm_size()))
            out_of_range(ap, "touches " + span_text(first, end) + " of " + std::to_string(mem.hbm_size()));
        r.base = mem.hbm_base() + ap.offset;
        partition_step = ap.partition_stride * es;
    } else {
        const bool sbuf = ap.space == MemSpace::SBUF;
        const uint32_t partitions = sbuf ? mem.chip().sbuf.partitions : mem.chip().psum.partitions;
        const uint64_t bpp = sbuf ? mem.chip().sbuf.bytes_per_partition : mem.chip().psum.bytes_per_partition;
        const uint64_t pitch = sbuf ? sbuf_pitch(mem.chip()) : bpp;
        if (static_cast<uint32_t>(ap.start_partition) + ap.partitions > partitions)
            out_of_range(ap, "partitions " + std::to_string(ap.start_partition) + ".." +
                                 std::to_string(ap.start_partition + ap.partitions - 1) + " of " +
                                 std::to_string(partitions));
        __int128 first = static_cast<__int128>(ap.offset) + lo * es;
        __int128 end = static_cast<__int128>(ap.offset) + (hi + 1) * es;
        if (first < 0 || end > static_cast<__int128>(bpp))
            out_of_range(ap, "touches " + span_text(first, end) + " of a " + std::to_string(bpp) +
                                 "-byte partition");
        r.base = (sbuf ? mem.sbuf(ap.start_partition, 0) : mem.psum(ap.start_partition, 0)) + ap.offset;
        partition_step = static_cast<int64_t>(pitch);
    }

    // Dims outermost first, size-1 dims dropped, then merge dims that continue each other.
    uint64_t size[kMaxFreeDims + 1];
    int64_t step[kMaxFreeDims + 1];
    int n = 0;
    if (ap.partitions > 1) size[n] = ap.partitions, step[n++] = partition_step;
    for (int k = 0; k < ap.ndim; ++k)
        if (ap.size[k] > 1) size[n] = ap.size[k], step[n++] = ap.stride[k] * es;
    if (n == 0) size[n] = 1, step[n++] = es;
    int m = 0;   // merged dims in [0, m)
    for (int k = 0; k < n; ++k) {
        if (m > 0 && step[m - 1] == step[k] * static_cast<int64_t>(size[k])) {
            size[m - 1] *= size[k];
            step[m - 1] = step[k];
        } else {
            size[m] = size[k], step[m++] = step[k];
        }
    }
    r.outer_dims = m - 1;
    r.rows = 1;
    for (int k = 0; k < m - 1; ++k) {
        r.outer_size[k] = size[k];
        r.outer_step[k] = step[k];
        r.rows *= size[k];
    }
    r.row_len = size[m - 1];
    r.row_step = step[m - 1];
    return r;
}

// Walks a resolved pattern element by element in row-major order, a row at a time.
class RowCursor {
public:
    explicit RowCursor(const ResolvedAp& r) : r_(r), row_(r.base) {}
    uint8_t* at() const { return row_ + static_cast<int64_t>(pos_) * r_.row_step; }
    uint64_t left_in_row() const { return r_.row_len - pos_; }
    void advance(uint64_t n) {
        pos_ += n;
        if (pos_ < r_.row_len) return;
        pos_ = 0;
        for (int k = r_.outer_dims - 1; k >= 0; --k) {   // odometer over the outer dims
            row_ += r_.outer_step[k];
            if (++idx_[k] < r_.outer_size[k]) return;
            row_ -= r_.outer_step[k] * static_cast<int64_t>(r_.outer_size[k]);
            idx_[k] = 0;
        }
    }

private:
    const ResolvedAp& r_;
    uint8_t* row_;
    uint64_t pos_ = 0;
    std::array<uint64_t, kMaxFreeDims> idx_{};
};

std::vector<uint8_t>& byte_scratch(size_t n) {
    thread_local std::vector<uint8_t> buf;
    if (buf.size() < n) buf.resize(n);
    return buf;
}

// Strided element copy of n elements of 'es' bytes.
void copy_strided(uint8_t* dst, int64_t dst_step, const uint8_t* src, int64_t src_step, int64_t es, uint64_t n) {
    if (dst_step == es && src_step == es) {
        std::memmove(dst, src, n * es);
        return;
    }
    switch (es) {
        case 1:
            for (uint64_t i = 0; i < n; ++i) dst[i * dst_step] = src[i * src_step];
            return;
        case 2:
            for (uint64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_step, src + i * src_step, 2);
            return;
        case 4:
            for (uint64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_step, src + i * src_step, 4);
            return;
        default:
            for (uint64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_step, src + i * src_step, es);
            return;
    }
}

// n elements starting at p with byte step 'step', to fp32.
void read_run(const uint8_t* p, int64_t step, DType dt, int64_t es, float* out, uint64_t n) {
    if (step == es) {
        convert_to_f32(p, dt, out, n);
        return;
    }
    if (step == 0) {   // broadcast
        std::fill(out, out + n, load_as_f32(p, dt));
        return;
    }
    if (dt == DType::f32) {   // strided fp32: gather directly
        for (uint64_t i = 0; i < n; ++i) std::memcpy(out + i, p + static_cast<int64_t>(i) * step, 4);
        return;
    }
    uint8_t* packed = byte_scratch(kChunkElems * 4).data();
    for (uint64_t done = 0; done < n; done += kChunkElems) {
        uint64_t c = std::min<uint64_t>(kChunkElems, n - done);
        copy_strided(packed, es, p + static_cast<int64_t>(done) * step, step, es, c);
        convert_to_f32(packed, dt, out + done, c);
    }
}

void write_run(const float* in, uint8_t* p, int64_t step, DType dt, int64_t es, uint64_t n) {
    if (step == es) {
        convert_from_f32(in, p, dt, n);
        return;
    }
    if (dt == DType::f32) {   // strided fp32: scatter directly
        for (uint64_t i = 0; i < n; ++i) std::memcpy(p + static_cast<int64_t>(i) * step, in + i, 4);
        return;
    }
    uint8_t* packed = byte_scratch(kChunkElems * 4).data();
    for (uint64_t done = 0; done < n; done += kChunkElems) {
        uint64_t c = std::min<uint64_t>(kChunkElems, n - done);
        convert_from_f32(in + done, packed, dt, c);
        copy_strided(p + static_cast<int64_t>(done) * step, step, packed, es, es, c);
    }
}

// Zero-filled on-chip memory backed by transparent huge pages where the host
// allows: instructions walk up to 128 partitions 192 KiB apart, which with 4 KiB
// pages is one TLB miss per partition row.
void allocate_on_chip(std::vector<uint8_t>& mem, size_t bytes) {
    mem.reserve(bytes);
#if defined(MADV_HUGEPAGE)
    constexpr uintptr_t kHugePage = 2u << 20;
    const auto begin = (reinterpret_cast<uintptr_t>(mem.data()) + kHugePage - 1) & ~(kHugePage - 1);
    const auto end = (reinterpret_cast<uintptr_t>(mem.data()) + bytes) & ~(kHugePage - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);   // a hint only
#endif
    mem.assign(bytes, 0);
}

}  // namespace

CoreMemory::CoreMemory(const ChipConfig& chip, uint64_t hbm_bytes, bool backed, uint32_t physical_cores)
    : chip_(chip), hbm_size_(hbm_bytes), backed_(backed), sbuf_(physical_cores), psum_(physical_cores) {
    if (physical_cores < 1 || physical_cores > kMaxPhysicalCores)
        throw std::invalid_argument("CoreMemory: " + std::to_string(physical_cores) + " physical cores (1 to " +
                                    std::to_string(kMaxPhysicalCores) + " per logical core)");
    if (hbm_bytes > 0) {
        int prot = backed ? PROT_READ | PROT_WRITE : PROT_NONE;
        void* p = mmap(nullptr, hbm_bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            throw std::runtime_error("CoreMemory: cannot map " + std::to_string(hbm_bytes) +
                                     " bytes of HBM: " + std::strerror(errno));
        hbm_ = static_cast<uint8_t*>(p);
#if defined(MADV_HUGEPAGE)
        // Operands stream through HBM in rows thousands of bytes apart; with 4 KiB pages a
        // step's working set of tens of MiB overflows the TLB. Huge pages are a hint only.
        if (backed) madvise(p, hbm_bytes, MADV_HUGEPAGE);
#endif
    }
    for (uint32_t c = 0; c < physical_cores; ++c) {
        allocate_on_chip(sbuf_[c], static_cast<size_t>(chip.sbuf.partitions) * sbuf_pitch(chip));
        allocate_on_chip(psum_[c], static_cast<size_t>(chip.psum.partitions) * chip.psum.bytes_per_partition);
    }
}

void CoreMemory::select_core(uint32_t core) {
    if (core >= sbuf_.size())
        throw std::out_of_range("physical core " + std::to_string(core) + " of a logical core of " +
                                std::to_string(sbuf_.size()));
    core_ = core;
}

CoreMemory::~CoreMemory() {
    if (hbm_) munmap(hbm_, hbm_size_);
}

uint8_t* CoreMemory::hbm(uint64_t addr) {
    if (!backed_) throw std::logic_error("timing-only mode: HBM holds no data");
    if (addr >= hbm_size_)
        throw std::out_of_range("hbm address " + std::to_string(addr) + " out of range (size " +
                                std::to_string(hbm_size_) + ")");
    return hbm_ + addr;
}

uint8_t* CoreMemory::sbuf(uint32_t partition, uint64_t offset) {
    if (partition >= chip_.sbuf.partitions || offset >= chip_.sbuf.bytes_per_partition)
        throw std::out_of_range("sbuf address (partition " + std::to_string(partition) + ", byte " +
                                std::to_string(offset) + ") out of range (" + std::to_string(chip_.sbuf.partitions) +
                                " partitions of " + std::to_string(chip_.sbuf.bytes_per_partition) + " bytes)");
    return sbuf_[core_].data() + partition * sbuf_pitch(chip_) + offset;
}

uint8_t* CoreMemory::psum(uint32_t partition, uint64_t offset) {
    if (partition >= chip_.psum.partitions || offset >= chip_.psum.bytes_per_partition)
        throw std::out_of_range("psum address (partition " + std::to_string(partition) + ", byte " +
                                std::to_string(offset) + ") out of range (" + std::to_string(chip_.psum.partitions) +
                                " partitions of " + std::to_string(chip_.psum.bytes_per_partition) + " bytes)");
    return psum_[core_].data() + partition * chip_.psum.bytes_per_partition + offset;
}

uint8_t* CoreMemory::element(const AccessPattern& ap, uint32_t p, uint64_t free_index) {
    if (p >= ap.partitions || free_index >= ap.free_elems())
        throw std::out_of_range("element (" + std::to_string(p) + ", " + std::to_string(free_index) +
                                ") outside " + format_ap(ap));
    int64_t elem = 0;
    for (int k = ap.ndim - 1; k >= 0; --k) {
        elem += static_cast<int64_t>(free_index % ap.size[k]) * ap.stride[k];
        free_index /= ap.size[k];
    }
    const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
    auto checked = [&](int64_t byte, uint64_t limit) {
        if (byte < 0 || static_cast<uint64_t>(byte) + es > limit)
            throw std::out_of_range(std::string(mem_space_name(ap.space)) + " element at byte " +
                                    std::to_string(byte) + " outside " + std::to_string(limit) + " bytes (" +
                                    format_ap(ap) + ")");
        return static_cast<uint64_t>(byte);
    };
    switch (ap.space) {
        case MemSpace::HBM: {
            int64_t byte = static_cast<int64_t>(ap.offset) + (static_cast<int64_t>(p) * ap.partition_stride + elem) * es;
            return hbm(checked(byte, hbm_size_));
        }
        case MemSpace::SBUF:
            return sbuf(ap.start_partition + p,
                        checked(static_cast<int64_t>(ap.offset) + elem * es, chip_.sbuf.bytes_per_partition));
        case MemSpace::PSUM:
            return psum(ap.start_partition + p,
                        checked(static_cast<int64_t>(ap.offset) + elem * es, chip_.psum.bytes_per_partition));
    }
    throw std::invalid_argument("element: bad memory space");
}

void CoreMemory::load_f32(const AccessPattern& ap, float* out) {
    ResolvedAp r = resolve(*this, ap);
    if (r.row_len == 0) return;
    RowCursor cur(r);
    for (uint64_t row = 0; row < r.rows; ++row) {
        read_run(cur.at(), r.row_step, r.dtype, r.elem_size, out, r.row_len);
        out += r.row_len;
        cur.advance(r.row_len);
    }
}

void CoreMemory::store_f32(const AccessPattern& ap, const float* in) {
    ResolvedAp r = resolve(*this, ap);
    if (r.row_len == 0) return;
    RowCursor cur(r);
    for (uint64_t row = 0; row < r.rows; ++row) {
        write_run(in, cur.at(), r.row_step, r.dtype, r.elem_size, r.row_len);
        in += r.row_len;
        cur.advance(r.row_len);
    }
}

void CoreMemory::copy(const AccessPattern& dst, const AccessPattern& src) {
    if (dst.elems() != src.elems())
        throw std::invalid_argument("copy: element counts differ: " + format_ap(dst) + " (" +
                                    std::to_string(dst.elems()) + ") <- " + format_ap(src) + " (" +
                                    std::to_string(src.elems()) + ")");
    ResolvedAp d = resolve(*this, dst);
    ResolvedAp s = resolve(*this, src);
    if (d.row_len == 0) return;
    RowCursor dc(d), sc(s);
    const bool same_dtype = dst.dtype == src.dtype;
    thread_local std::vector<float> staging(kChunkElems);
    for (uint64_t left = dst.elems(); left > 0;) {
        uint64_t n = std::min({dc.left_in_row(), sc.left_in_row(), left});
        if (same_dtype) {
            copy_strided(dc.at(), d.row_step, sc.at(), s.row_step, d.elem_size, n);
        } else {
            n = std::min<uint64_t>(n, kChunkElems);
            read_run(sc.at(), s.row_step, s.dtype, s.elem_size, staging.data(), n);
            write_run(staging.data(), dc.at(), d.row_step, d.dtype, d.elem_size, n);
        }
        dc.advance(n);
        sc.advance(n);
        left -= n;
    }
}

}  // namespace trnsim
