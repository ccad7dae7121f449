"""A minimum s-t cut (Dinic's max-flow), for the partitioner.

Small and self-contained: nodes are strings, capacities floats (`math.inf` for edges that
must not be cut). `min_cut` returns the source side of a minimum cut; the cut edges are the
edges leaving it. Iterative throughout, so graphs of thousands of nodes in a chain do not
hit Python's recursion limit.
"""

from __future__ import annotations

import math
from collections import deque


class CutError(RuntimeError):
    """Every cut separating source and sink crosses an infinite edge."""


class FlowNetwork:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.head: list[list[int]] = []  # node -> edge ids
        self.to: list[int] = []
        self.cap: list[float] = []

    def node(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.head)
            self.head.append([])
        return i

    def add_edge(self, a: str, b: str, capacity: float) -> None:
        u, v = self.node(a), self.node(b)
        # edge e and its residual twin e ^ 1
        self.head[u].append(len(self.to))
        self.to.append(v)
        self.cap.append(capacity)
        self.head[v].append(len(self.to))
        self.to.append(u)
        self.cap.append(0.0)

    def min_cut(self, source: str, sink: str) -> set[str]:
        """The nodes on the source side of a minimum cut."""
        s, t = self.node(source), self.node(sink)
        while True:
            level = self._levels(s)
            if level[t] < 0:
                break
            if self._blocking_flow(s, t, level) == math.inf:
                raise CutError("no finite cut separates the source from the sink")
        level = self._levels(s)
        names = list(self.index)
        return {names[i] for i in range(len(names)) if level[i] >= 0}

    def _levels(self, s: int) -> list[int]:
        level = [-1] * len(self.head)
        level[s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self.head[u]:
                v = self.to[e]
                if self.cap[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level

    def _blocking_flow(self, s: int, t: int, level: list[int]) -> float:
        arc = [0] * len(self.head)  # the next edge to try at each node
        total = 0.0
        while True:
            path: list[int] = []  # edge ids from s
            u = s
            while u != t:
                edges = self.head[u]
                while arc[u] < len(edges):
                    e = edges[arc[u]]
                    v = self.to[e]
                    if self.cap[e] > 0 and level[v] == level[u] + 1:
                        break
                    arc[u] += 1
                if arc[u] == len(edges):  # dead end: retreat
                    if not path:
                        return total
                    level[u] = -1
                    e = path.pop()
                    u = self.to[e ^ 1]
                    arc[u] += 1
                    continue
                e = edges[arc[u]]
                path.append(e)
                u = self.to[e]
            push = min(self.cap[e] for e in path)
            if push == math.inf:
                return math.inf
            for e in path:
                self.cap[e] -= push
                self.cap[e ^ 1] += push
            total += push
