"""Property tests: views, shape ops and indexing on neuron match CPU over random shapes
(empty and size-1 dims) and non-contiguous layouts; writes through views reach the base;
out-of-range indices and impossible shapes raise the same kind of error as on CPU."""

import torch
from hypothesis import given
from hypothesis import strategies as st

import trnsim.neuron  # noqa: F401
from property_strategies import ALL_DTYPES, FLOAT_DTYPES, PROPERTY_SETTINGS, make_values, operands, shapes
from trnsim.conformance.differential import assert_matches_cpu

SEEDS = st.integers(0, 2**16)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=ALL_DTYPES, min_dims=1), data=st.data())
def test_permute_transpose_and_reshape_match_cpu(x, data):
    ndim = len(x.shape)
    order = data.draw(st.permutations(range(ndim)))
    dim0, dim1 = data.draw(st.integers(-ndim, ndim - 1)), data.draw(st.integers(-ndim, ndim - 1))

    def shape_ops(base):
        view = x.view(base)
        return (view.permute(order), view.transpose(dim0, dim1), view.reshape(-1),
                view.flatten(), view.unsqueeze(0).squeeze(0), view.contiguous(),
                view.transpose(dim0, dim1).reshape(view.shape[::-1]) if ndim == 2 else view)

    assert_matches_cpu(shape_ops, x.base)


@PROPERTY_SETTINGS
@given(shape=shapes(min_dims=1), data=st.data(), seed=SEEDS)
def test_view_of_incompatible_size_raises_like_cpu(shape, data, seed):
    x = make_values(shape, torch.float32, seed)
    new_shape = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple))
    assert_matches_cpu(lambda t: t.view(new_shape), x)
    assert_matches_cpu(lambda t: t.t().view(-1) if t.dim() == 2 else t.view(-1), x)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=ALL_DTYPES, min_dims=1), data=st.data())
def test_slicing_narrow_select_and_split_match_cpu(x, data):
    ndim = len(x.shape)
    dim = data.draw(st.integers(0, ndim - 1))
    size = x.shape[dim]
    start = data.draw(st.integers(-size - 1, size + 1))
    step = data.draw(st.integers(1, 3))
    index = data.draw(st.integers(-size - 1, size))     # out of range raises IndexError
    chunk = data.draw(st.integers(1, 3))

    def slices(base):
        view = x.view(base)
        sliced = view[(slice(None),) * dim + (slice(start, None, step),)]
        return sliced, view.split(chunk, dim), view.chunk(chunk, dim), view.select(dim, index)

    assert_matches_cpu(slices, x.base)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=ALL_DTYPES, min_dims=1), data=st.data(), seed=SEEDS)
def test_index_select_gather_and_advanced_indexing_match_cpu(x, data, seed):
    ndim = len(x.shape)
    dim = data.draw(st.integers(0, ndim - 1))
    size = x.shape[dim]
    # Sometimes an index is out of range: both devices must raise the same kind of error.
    high = size if data.draw(st.integers(0, 4)) == 0 else max(size - 1, 0)
    count = data.draw(st.integers(0, 4))
    index = torch.tensor(data.draw(st.lists(st.integers(-size if size else 0, high),
                                            min_size=count, max_size=count)), dtype=torch.int64)
    gather_index = torch.randint(0, max(size, 1), x.shape, generator=torch.Generator().manual_seed(seed))
    mask = make_values(x.shape, torch.bool, seed)

    def indexing(base, index, gather_index, mask):
        view = x.view(base)
        nonnegative = index.remainder(max(size, 1))
        gathered = view.gather(dim, gather_index) if size else view
        return (view.index_select(dim, nonnegative) if index.numel() == 0 or size else view,
                view[(slice(None),) * dim + (index,)], gathered, view[mask])

    assert_matches_cpu(indexing, x.base, index, gather_index, mask)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=FLOAT_DTYPES, min_dims=1, layouts=("contiguous",)), data=st.data(),
       seed=SEEDS, value=st.floats(-4, 4))
def test_index_put_scatter_and_masked_fill_match_cpu(x, data, seed, value):
    ndim = len(x.shape)
    dim = data.draw(st.integers(0, ndim - 1))
    size = x.shape[dim]
    generator = torch.Generator().manual_seed(seed)
    scatter_index = torch.randint(0, max(size, 1), x.shape, generator=generator)
    rows = torch.randperm(size, generator=generator)[:data.draw(st.integers(0, size))]
    mask = make_values(x.shape, torch.bool, seed)

    def writes(base, scatter_index, rows, mask):
        filled = base.clone().masked_fill_(mask, value)
        written = base.clone()
        written[(slice(None),) * dim + (rows,)] = value
        scattered = base.clone().scatter_(dim, scatter_index, 1.0) if size else base
        added = base.clone().index_add_(dim, rows, base.index_select(dim, rows))
        return filled, written, scattered, added

    assert_matches_cpu(writes, x.base, scatter_index, rows, mask)


@PROPERTY_SETTINGS
@given(shape=shapes(min_dims=1, max_dims=3), data=st.data(), seed=SEEDS,
       dtype=st.sampled_from(ALL_DTYPES))
def test_cat_and_stack_match_cpu(shape, data, seed, dtype):
    dim = data.draw(st.integers(0, len(shape) - 1))
    parts = []
    for offset in range(data.draw(st.integers(1, 3))):
        part_shape = list(shape)
        part_shape[dim] = data.draw(st.integers(0, 3))
        parts.append(make_values(tuple(part_shape), dtype, seed + offset))
    # Mismatched sizes off the cat dim must raise on both devices.
    mismatched = data.draw(st.integers(0, 4)) == 0 and len(shape) > 1
    if mismatched:
        other_dim = (dim + 1) % len(shape)
        wrong = list(parts[0].shape)
        wrong[other_dim] += 1
        parts.append(make_values(tuple(wrong), dtype, seed + 7))

    assert_matches_cpu(lambda *tensors: torch.cat(tensors, dim), *parts)
    assert_matches_cpu(lambda *tensors: torch.stack(tensors, dim), *parts)


@PROPERTY_SETTINGS
@given(x=operands(dtypes=FLOAT_DTYPES, layouts=("contiguous",), min_dims=2), data=st.data())
def test_writes_through_views_reach_the_base(x, data):
    ndim = len(x.shape)
    dim = data.draw(st.integers(0, ndim - 1))

    def write_through(base):
        view = base.transpose(0, -1)
        view.mul_(3)
        base.narrow(dim, 0, min(1, base.shape[dim])).zero_()
        base.select(dim, 0).fill_(7) if base.shape[dim] else None
        return base

    assert_matches_cpu(write_through, x.base)


def test_expand_to_incompatible_shape_raises_like_cpu():
    assert_matches_cpu(lambda t: t.expand(3, 5), torch.ones(2, 1))
    assert_matches_cpu(lambda t: t[5], torch.ones(3))
