// Graph IR: building, queries, text form and consistency checks.
#include <algorithm>
#include <sstream>

#include "trnsim/compiler.h"

namespace trnsim::compiler {

namespace {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
    std::vector<int64_t> st(sizes.size(), 1);
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 2; d >= 0; --d)
        st[d] = st[d + 1] * std::max<int64_t>(sizes[d + 1], 1);
    return st;
}

int64_t product(const std::vector<int64_t>& v) {
    int64_t n = 1;
    for (int64_t x : v) n *= x;
    return n;
}

std::string shape_str(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "]";
}

}  // namespace

const char* op_name(Op op) {
    switch (op) {
        case Op::view: return "view";
        case Op::copy: return "copy";
        case Op::fill: return "fill";
        case Op::concat: return "concat";
        case Op::unary: return "unary";
        case Op::binary: return "binary";
        case Op::binary_scalar: return "binary_scalar";
        case Op::where: return "where";
        case Op::activation_backward: return "activation_backward";
        case Op::reduce: return "reduce";
        case Op::softmax: return "softmax";
        case Op::softmax_backward: return "softmax_backward";
        case Op::layer_norm: return "layer_norm";
        case Op::layer_norm_backward: return "layer_norm_backward";
        case Op::rms_norm: return "rms_norm";
        case Op::matmul: return "matmul";
        case Op::addmm: return "addmm";
        case Op::attention: return "attention";
        case Op::attention_backward: return "attention_backward";
        case Op::fused_elementwise: return "fused_elementwise";
        case Op::fused_matmul: return "fused_matmul";
        case Op::eager: return "eager";
        case Op::count_: break;
    }
    return "?";
}

bool is_pointwise(Op op) {
    return op == Op::copy || op == Op::unary || op == Op::binary || op == Op::binary_scalar || op == Op::where ||
           op == Op::activation_backward;
}

int64_t Value::numel() const { return product(sizes); }

bool Value::is_contiguous() const {
    int64_t expect = 1;
    for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
        if (sizes[d] == 1) continue;
        if (strides[d] != expect) return false;
        expect *= sizes[d];
    }
    return true;
}

int Graph::add_input(DType dt, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t storage_offset,
                     std::string name) {
    if (strides.empty()) strides = contiguous_strides(sizes);
    if (strides.size() != sizes.size()) throw CompileError("add_input: sizes and strides differ in rank");
    int64_t extent = 0;   // elements the view reaches, from the storage start
    if (product(sizes) > 0) {
        extent = storage_offset + 1;
        for (size_t d = 0; d < sizes.size(); ++d) extent += (sizes[d] - 1) * std::max<int64_t>(strides[d], 0);
    }
    Storage st;
    st.bytes = extent * static_cast<int64_t>(dtype_size(dt));
    st.input = static_cast<int>(inputs.size());
    storages.push_back(st);
    Value v;
    v.dtype = dt;
    v.sizes = std::move(sizes);
    v.strides = std::move(strides);
    v.offset = storage_offset;
    v.storage = static_cast<int>(storages.size()) - 1;
    v.name = name.empty() ? "in" + std::to_string(inputs.size()) : std::move(name);
    values.push_back(std::move(v));
    inputs.push_back(static_cast<int>(values.size()) - 1);
    return inputs.back();
}

int Graph::add_node(Node node, const std::vector<std::pair<DType, std::vector<int64_t>>>& outs) {
    for (int in : node.inputs)
        if (in < 0 || in >= static_cast<int>(values.size()))
            throw CompileError(std::string(op_name(node.op)) + ": input value " + std::to_string(in) + " does not exist");
    const int index = static_cast<int>(nodes.size());
    node.outputs.clear();
    for (const auto& [dt, sizes] : outs) {
        Value v;
        v.dtype = dt;
        v.sizes = sizes;
        v.strides = contiguous_strides(sizes);
        v.producer = index;
        Storage st;
        st.bytes = product(sizes) * static_cast<int64_t>(dtype_size(dt));
        storages.push_back(st);
        v.storage = static_cast<int>(storages.size()) - 1;
        values.push_back(std::move(v));
        node.outputs.push_back(static_cast<int>(values.size()) - 1);
    }
    nodes.push_back(std::move(node));
    return index;
}

void Graph::set_dense_strides(int v, std::vector<int64_t> strides) {
    if (v < 0 || v >= static_cast<int>(values.size())) throw CompileError("set_dense_strides: no value " + std::to_string(v));
    Value& val = values[v];
    const int p = val.producer;
    if (p < 0 || (nodes[p].op != Op::attention && nodes[p].op != Op::attention_backward))
        throw CompileError("set_dense_strides: %" + std::to_string(v) + " is not an output of an attention node");
    if (strides.size() != val.sizes.size())
        throw CompileError("set_dense_strides: %" + std::to_string(v) + " has " + std::to_string(val.sizes.size()) +
                           " dims, got " + std::to_string(strides.size()) + " strides");
    // Dense: sorted by stride, each dim's stride is the product of the sizes inside it.
    std::vector<size_t> order(strides.size());
    for (size_t d = 0; d < order.size(); ++d) order[d] = d;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
    int64_t expect = 1;
    for (size_t d : order) {
        if (val.sizes[d] != 1 && strides[d] != expect)
            throw CompileError("set_dense_strides: strides " + shape_str(strides) + " are not a dense order of " +
                               shape_str(val.sizes));
        expect *= val.sizes[d];
    }
    val.strides = std::move(strides);
}

void Graph::place_in(int v, int base, std::vector<int64_t> strides, int64_t offset) {
    const int n = static_cast<int>(values.size());
    if (v < 0 || v >= n || base < 0 || base >= n) throw CompileError("place_in: no such value");
    Value &val = values[v], &into = values[base];
    const int p = val.producer;
    if (p < 0 || p != into.producer || (nodes[p].op != Op::attention && nodes[p].op != Op::attention_backward))
        throw CompileError("place_in: %" + std::to_string(v) + " and %" + std::to_string(base) +
                           " are not outputs of one attention node");
    if (val.dtype != into.dtype || strides.size() != val.sizes.size())
        throw CompileError("place_in: %" + std::to_string(v) + " does not fit %" + std::to_string(base) + "'s layout");
    int64_t last = offset;
    for (size_t d = 0; d < strides.size(); ++d) {
        if (strides[d] < 0) throw CompileError("place_in: negative stride");
        last += (val.sizes[d] - 1) * strides[d];
    }
    if (offset < 0 || (val.numel() > 0 && last >= into.numel()))
        throw CompileError("place_in: %" + std::to_string(v) + " at offset " + std::to_string(offset) + " strides " +
                           shape_str(strides) + " leaves %" + std::to_string(base) + " " + shape_str(into.sizes));
    val.storage = into.storage;
    val.strides = std::move(strides);
    val.offset = offset;
}

int Graph::add_view(int in, std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) {
    if (strides.empty()) strides = contiguous_strides(sizes);
    Node n;
    n.op = Op::view;
    n.inputs = {in};
    n.dims = sizes;
    n.strides = strides;
    n.i0 = offset;
    const int index = static_cast<int>(nodes.size());
    Value v;
    v.dtype = values[in].dtype;
    v.sizes = std::move(sizes);
    v.strides = std::move(strides);
    v.offset = offset;
    v.storage = values[in].storage;
    v.producer = index;
    values.push_back(std::move(v));
    n.outputs = {static_cast<int>(values.size()) - 1};
    nodes.push_back(std::move(n));
    return nodes.back().outputs[0];
}

namespace {
std::vector<int64_t> broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    const size_t n = std::max(a.size(), b.size());
    std::vector<int64_t> out(n, 1);
    for (size_t i = 0; i < n; ++i) {
        const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
        const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
        if (x != y && x != 1 && y != 1) throw CompileError("shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
        out[i] = x == 1 ? y : x;
    }
    return out;
}
}  // namespace

int Graph::unary(ops::Unary u, int x) {
    Node n;
    n.op = Op::unary;
    n.inputs = {x};
    n.i0 = static_cast<int64_t>(u);
    return nodes[add_node(std::move(n), {{values[x].dtype, values[x].sizes}})].outputs[0];
}

int Graph::binary(ops::Binary b, int x, int y, float alpha) {
    Node n;
    n.op = Op::binary;
    n.inputs = {x, y};
    n.i0 = static_cast<int64_t>(b);
    n.f0 = alpha;
    const bool cmp = b >= ops::Binary::eq && b <= ops::Binary::logical_xor;
    const DType dt = cmp ? DType::boolean : values[x].dtype;
    return nodes[add_node(std::move(n), {{dt, broadcast(values[x].sizes, values[y].sizes)}})].outputs[0];
}

int Graph::binary_scalar(ops::Binary b, int x, float s, bool reverse) {
    Node n;
    n.op = Op::binary_scalar;
    n.inputs = {x};
    n.i0 = static_cast<int64_t>(b);
    n.f0 = s;
    n.i1 = reverse ? 1 : 0;
    const bool cmp = b >= ops::Binary::eq && b <= ops::Binary::logical_xor;
    return nodes[add_node(std::move(n), {{cmp ? DType::boolean : values[x].dtype, values[x].sizes}})].outputs[0];
}

int Graph::cast(int x, DType dt) {
    Node n;
    n.op = Op::copy;
    n.inputs = {x};
    return nodes[add_node(std::move(n), {{dt, values[x].sizes}})].outputs[0];
}

int Graph::matmul(int a, int b) {
    const auto &sa = values[a].sizes, &sb = values[b].sizes;
    if (sa.size() < 2 || sb.size() < 2 || sa.back() != sb[sb.size() - 2])
        throw CompileError("matmul: shapes " + shape_str(sa) + " and " + shape_str(sb) + " do not multiply");
    std::vector<int64_t> out = broadcast(std::vector<int64_t>(sa.begin(), sa.end() - 2),
                                         std::vector<int64_t>(sb.begin(), sb.end() - 2));
    out.push_back(sa[sa.size() - 2]);
    out.push_back(sb.back());
    Node n;
    n.op = Op::matmul;
    n.inputs = {a, b};
    return nodes[add_node(std::move(n), {{values[a].dtype, out}})].outputs[0];
}

int Graph::reduce(ops::Reduce r, int x, std::vector<int64_t> dims, bool keepdim) {
    const auto& s = values[x].sizes;
    const int64_t nd = static_cast<int64_t>(s.size());
    for (int64_t& d : dims) if (d < 0) d += nd;
    std::vector<int64_t> out;
    for (int64_t d = 0; d < nd; ++d) {
        const bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
        if (!red) out.push_back(s[d]);
        else if (keepdim) out.push_back(1);
    }
    Node n;
    n.op = Op::reduce;
    n.inputs = {x};
    n.i0 = static_cast<int64_t>(r);
    n.dims = std::move(dims);
    return nodes[add_node(std::move(n), {{values[x].dtype, out}})].outputs[0];
}

int Graph::softmax(int x, int64_t dim) {
    Node n;
    n.op = Op::softmax;
    n.inputs = {x};
    n.i0 = dim < 0 ? dim + static_cast<int64_t>(values[x].sizes.size()) : dim;
    return nodes[add_node(std::move(n), {{values[x].dtype, values[x].sizes}})].outputs[0];
}

int Graph::add_value(DType dt, std::vector<int64_t> sizes, int producer) {
    Storage st;
    st.bytes = product(sizes) * static_cast<int64_t>(dtype_size(dt));
    storages.push_back(st);
    Value v;
    v.dtype = dt;
    v.strides = contiguous_strides(sizes);
    v.sizes = std::move(sizes);
    v.producer = producer;
    v.storage = static_cast<int>(storages.size()) - 1;
    values.push_back(std::move(v));
    return static_cast<int>(values.size()) - 1;
}

std::vector<std::vector<int>> Graph::users() const {
    std::vector<std::vector<int>> u(values.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
        if (nodes[i].dead) continue;
        for (int in : nodes[i].inputs)
            if (u[in].empty() || u[in].back() != static_cast<int>(i)) u[in].push_back(static_cast<int>(i));
    }
    return u;
}

bool Graph::is_graph_output(int v) const { return std::find(outputs.begin(), outputs.end(), v) != outputs.end(); }

std::vector<int> Graph::live_nodes() const {
    std::vector<int> out;
    for (size_t i = 0; i < nodes.size(); ++i)
        if (!nodes[i].dead) out.push_back(static_cast<int>(i));
    return out;
}

namespace {
std::string step_str(const Step& s) {
    std::ostringstream os;
    os << op_name(s.op);
    if (s.op == Op::unary || s.op == Op::binary || s.op == Op::binary_scalar || s.op == Op::activation_backward)
        os << "(" << s.i0 << ")";
    if (s.op == Op::binary_scalar) os << "{" << s.f0 << (s.i1 ? ",rev" : "") << "}";
    if (s.op == Op::binary && s.f0 != 1.0f) os << "{alpha=" << s.f0 << "}";
    os << ":" << dtype_name(s.dtype);
    for (int a : s.args) os << " " << (a >= 0 ? "in" + std::to_string(a) : "s" + std::to_string(-a - 1));
    return os.str();
}
}  // namespace

std::string Graph::str() const {
    std::ostringstream os;
    os << "graph " << name << "(";
    for (size_t i = 0; i < inputs.size(); ++i) {
        const Value& v = values[inputs[i]];
        os << (i ? ", " : "") << "%" << inputs[i] << ":" << dtype_name(v.dtype) << shape_str(v.sizes);
    }
    os << ")\n";
    for (int i : live_nodes()) {
        const Node& n = nodes[i];
        os << "  ";
        for (size_t k = 0; k < n.outputs.size(); ++k) {
            const Value& v = values[n.outputs[k]];
            os << (k ? ", " : "") << "%" << n.outputs[k] << ":" << dtype_name(v.dtype) << shape_str(v.sizes);
            if (n.op != Op::view && (!v.is_contiguous() || v.offset))
                os << "{" << shape_str(v.strides) << "+" << v.offset << "}";
        }
        os << " = " << op_name(n.op);
        if (n.op == Op::eager || !n.label.empty()) os << "<" << n.label << ">";
        if (n.op == Op::view) os << shape_str(n.dims) << "{" << shape_str(n.strides) << "+" << n.i0 << "}";
        if (n.op == Op::reduce) os << "(" << n.i0 << ")" << shape_str(n.dims);
        if (n.op == Op::unary || n.op == Op::binary || n.op == Op::binary_scalar || n.op == Op::softmax ||
            n.op == Op::attention)
            os << "(" << n.i0 << ")";
        for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", " : " ") << "%" << n.inputs[k];
        os << "\n";
        for (size_t k = 0; k < n.body.size(); ++k) os << "      s" << k << " = " << step_str(n.body[k]) << "\n";
    }
    os << "  return";
    for (size_t i = 0; i < outputs.size(); ++i) os << (i ? ", " : " ") << "%" << outputs[i];
    os << "\n";
    return os.str();
}

void Graph::verify() const {
    std::vector<bool> defined(values.size(), false);
    for (int v : inputs) defined[v] = true;
    for (int i : live_nodes()) {
        const Node& n = nodes[i];
        for (int in : n.inputs)
            if (in < 0 || in >= static_cast<int>(values.size()) || !defined[in])
                throw CompileError("node " + std::to_string(i) + " (" + op_name(n.op) + ") reads %" + std::to_string(in) +
                                   " before it is defined");
        for (int out : n.outputs) defined[out] = true;
        if (n.op == Op::view && values[n.outputs[0]].storage != values[n.inputs[0]].storage)
            throw CompileError("view %" + std::to_string(n.outputs[0]) + " is not in the storage of its input %" +
                               std::to_string(n.inputs[0]));
        for (const Step& s : n.body)
            for (int a : s.args)
                if (a >= static_cast<int>(n.inputs.size()))
                    throw CompileError("node " + std::to_string(i) + ": fused step reads missing input " + std::to_string(a));
    }
    for (int v : outputs)
        if (!defined[v]) throw CompileError("graph output %" + std::to_string(v) + " is not defined");
}

}  // namespace trnsim::compiler
