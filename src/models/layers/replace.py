"""Replacing sub-cells of a MindSpore network in place."""
from mindspore import nn


def replace_cells(network, should_replace, make_replacement):
    """Replace every sub-cell with `should_replace(cell)` by `make_replacement(name, cell)`; return the count.

    `name` is the cell's dotted path (e.g. "stages.0.0.conv1"); the replacement takes the
    cell's place under its parent, and its parameters are renamed to that path, so the
    parameter names of the new network read like the old one's. SequentialCell keeps
    a separate list of its children for construct(); it is refreshed too.
    """
    targets = [(name, cell) for name, cell in network.cells_and_names()
               if name and should_replace(cell)]
    for name, cell in targets:
        parent_name, _, child = name.rpartition(".")
        parent = network
        for part in filter(None, parent_name.split(".")):
            parent = parent._cells[part]  # noqa: SLF001  (MindSpore exposes children only this way)
        new = make_replacement(name, cell)
        new.update_parameters_name(name + ".")
        parent._cells[child] = new  # noqa: SLF001
        if isinstance(parent, nn.SequentialCell):
            parent.cell_list = list(parent._cells.values())  # noqa: SLF001
    return len(targets)
