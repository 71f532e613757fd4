"""Walking a query's analysed plan through py4j: the two helpers the load-time analysis
(`analysis`) and the check of a changed job (`changes`) share."""

from __future__ import annotations


def seq(scala_seq) -> list:
    """A Scala ``Seq`` as a list."""
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def streaming_nodes(node, found: list) -> None:
    """Append the plan's streaming nodes to ``found``, children before their parent."""
    for child in seq(node.children()):
        streaming_nodes(child, found)
    if node.isStreaming():
        found.append(node)
