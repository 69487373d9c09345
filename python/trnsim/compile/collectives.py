"""Functional collectives in compiled graphs: communication nodes.

DTensor, tensor parallelism and torch.distributed._functional_collectives put collectives into
the graphs Dynamo captures as ``_c10d_functional`` ops: a collective (``all_reduce``,
``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_to_all_single``, their coalesced
forms), which issues the communication and returns its output, and ``wait_tensor`` at the first
use of that output. The compiler does not turn them into device programs: they split the graph
into program segments, and the runtime issues each between the segments around it through the
c10d backend of the group ("neuron": trnsim.distributed). The collective goes on the device's
communication queue as an asynchronous collective, so the segments that follow it before its
``wait_tensor`` run while it is in flight; ``wait_tensor`` makes the device wait for its end
(trnsim.distributed.clock). Values are exact: they move as in eager execution.
"""

from __future__ import annotations

NAMESPACES = ("_c10d_functional.", "_c10d_functional_autograd.", "c10d.")


def is_communication(label: str) -> bool:
    """Whether a graph node (its label: the op's qualified name) is a collective or its wait."""
    return label.startswith(NAMESPACES)


def _is_comm(node) -> bool:
    return node.op == "call_function" and is_communication(str(node.target))


def _is_wait(node) -> bool:
    return _is_comm(node) and str(node.target).split(".")[1] == "wait_tensor"


def overlap_collectives(gm) -> int:
    """Reorders a graph so that its collectives overlap the compute that does not need them, as far
    as its data dependencies allow: each collective is issued as soon as its inputs exist (after
    the collective before it: the ranks issue them in one order), and each wait_tensor moves down to
    just before the first use of its result. Dynamo places the wait right after its collective;
    this is where a GPU backend's scheduler would move it. Returns the number of nodes moved."""
    graph = gm.graph
    if not any(_is_comm(n) for n in graph.nodes):
        return 0
    order = {n: i for i, n in enumerate(graph.nodes)}
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    moved = 0
    previous = placeholders[-1] if placeholders else None
    for node in list(graph.nodes):
        if not _is_comm(node) or _is_wait(node):
            continue
        anchors = [n for n in node.all_input_nodes] + ([previous] if previous is not None else [])
        anchor = max(anchors, key=order.__getitem__, default=None)
        if anchor is not None and anchor.next is not node:
            anchor.append(node)
            moved += 1
        previous = node
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in list(graph.nodes):
        if not _is_wait(node) or not node.users:
            continue
        first_use = min(node.users, key=order.__getitem__)
        if node.next is not first_use:
            first_use.prepend(node)
            moved += 1
    if moved:
        graph.lint()
        gm.recompile()
    return moved
