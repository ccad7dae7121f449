"""The programs of the side-effect differential suite (tests/tracer/test_side_effects_differential.py):
closures, cells, nonlocal and global writes, generators, iterators, containers and objects
changed across graph breaks, functions returned from compiled code.

Each case is the source of a module that defines `make()` -> (fn, observe) and `args()`;
each `BREAK` line becomes a graph break or a `pass` (see the suite's docstring).
"""

from __future__ import annotations

CASES: dict[str, str] = {
    "nonlocal_box": """
        def make():
            box = None
            def fn(a, b):
                nonlocal box
                box = a * 3 + b
                BREAK
                box = box + a
                BREAK
                box = box * 2
                BREAK
                return a
            return fn, lambda: box

        def args():
            return torch.randn(3), torch.randn(3)
    """,
    "nonlocal_counter": """
        def make():
            n = 0
            def fn(x):
                nonlocal n
                n += 1
                BREAK
                y = x * n
                BREAK
                n += 1
                BREAK
                return y + n
            return fn, lambda: n

        def args():
            return (torch.randn(4),)
    """,
    "cell_shared_by_closures": """
        def make():
            total = torch.zeros(3)
            calls = 0
            def add(v):
                nonlocal total, calls
                total = total + v
                calls += 1
            def read():
                return total * 1
            def fn(x):
                add(x)
                BREAK
                before = read()
                add(x * 2)
                BREAK
                add(before)
                BREAK
                return read() + calls
            return fn, lambda: (total, calls)

        def args():
            return (torch.randn(3),)
    """,
    "cell_holding_list": """
        def make():
            hist = []
            def fn(x):
                hist.append(x + 1)
                BREAK
                hist.append(x * len(hist))
                BREAK
                last = hist.pop(0)
                BREAK
                return last + len(hist)
            return fn, lambda: hist

        def args():
            return (torch.randn(2),)
    """,
    "returned_closure": """
        def make():
            def fn(x):
                s = x.sum()
                k = 2
                BREAK
                def inner(y):
                    return y * k + s
                BREAK
                k = 3
                BREAK
                return inner
            return fn, lambda: None

        def args():
            return (torch.randn(3),)
    """,
    "returned_closure_writes_its_cell": """
        def make():
            made = []
            def fn(x):
                s = x.sum()
                def inc():
                    nonlocal s
                    s = s + 1
                    return s
                BREAK
                inc()
                BREAK
                made.append(inc)
                BREAK
                return inc
            return fn, lambda: [f() for f in made]

        def args():
            return (torch.randn(3),)
    """,
    "global_writes": """
        COUNT = 0
        LAST = None
        ACC = []
        TABLE = {"a": 1}

        def make():
            def fn(x):
                global COUNT, LAST
                COUNT += 1
                BREAK
                LAST = x * COUNT
                ACC.append(LAST + 1)
                BREAK
                TABLE["last"] = x + COUNT
                TABLE.pop("a", None)
                BREAK
                return x * COUNT + len(ACC)
            return fn, lambda: (COUNT, LAST, ACC, TABLE)

        def args():
            return (torch.randn(3),)
    """,
    "list_and_dict_across_breaks": """
        def make():
            def fn(x, items, d):
                items.append(x + 1)
                BREAK
                y = items.pop()
                d.pop("a")
                BREAK
                d["c"] = y * 2
                items.insert(0, x)
                BREAK
                del items[-1]
                d.update(e=x - 1)
                items.extend([y, y * 3])
                return y
            return fn, lambda: None

        def args():
            return torch.randn(3), [torch.zeros(3)], {"a": 1, "b": torch.ones(3)}
    """,
    "aliased_containers": """
        N = [0]
        SHARED = []

        def make():
            def fn(x, a, b):
                a.append(x)
                BREAK
                n = len(b)
                b.append(x * n)
                BREAK
                SHARED.append(len(a))
                BREAK
                return x * len(a) + n
            return fn, lambda: SHARED

        def args():
            # one list passed twice on odd calls, two lists on even calls, the global list
            # itself every third call
            N[0] += 1
            a = [torch.zeros(2)]
            if N[0] % 3 == 0:
                return torch.randn(2), SHARED, a
            return torch.randn(2), a, a if N[0] % 2 else [torch.zeros(2)]
    """,
    "container_read_then_replaced": """
        def make():
            def fn(x, items, d):
                first = items[0]
                old = d["k"]
                items[0] = x
                d["k"] = x * 2
                BREAK
                items[1] = first + old
                BREAK
                d["k"], items[0] = items[0], d["k"]
                BREAK
                return first, old
            return fn, lambda: None

        def args():
            return torch.randn(3), [torch.randn(3), torch.randn(3)], {"k": torch.randn(3)}
    """,
    "set_of_constants": """
        SEEN = set()

        def make():
            def fn(x, tags):
                tags.add(1)
                BREAK
                SEEN.add(len(tags))
                BREAK
                tags.discard(0)
                BREAK
                return x * len(tags)
            return fn, lambda: SEEN

        def args():
            return torch.randn(2), {0, 5}
    """,
    "returns_its_inputs": """
        def make():
            def fn(x, items, d):
                items.append(x * 2)
                BREAK
                d["n"] = len(items)
                BREAK
                y = x + 1
                BREAK
                return x, items, d, y
            return fn, lambda: None

        def args():
            return torch.randn(3), [], {}
    """,
    "attribute_writes": """
        class Box:
            pass

        def make():
            def fn(x, box):
                old = box.value
                box.value = x + 1
                BREAK
                box.count = box.count + 1
                BREAK
                box.value, box.prev = box.value * 2, old
                BREAK
                return old + box.value
            return fn, lambda: None

        def args():
            box = Box()
            box.value = torch.randn(3)
            box.count = 0
            return torch.randn(3), box
    """,
    "generator_expression": """
        def make():
            def fn(x, ts):
                total = sum(t.sum() for t in ts)
                BREAK
                n = sum(1 for t in ts if t.numel() > 1)
                BREAK
                squares = list(t * t for t in ts)
                BREAK
                return total + n, squares
            return fn, lambda: None

        def args():
            return torch.randn(3), [torch.randn(2), torch.randn(1), torch.randn(4)]
    """,
    "generator_with_side_effects": """
        def gen(x, items):
            for i in range(3):
                items.append(i)
                yield x * i

        def make():
            def fn(x, items):
                seen = []
                for v in gen(x, items):
                    seen.append(len(items))
                    BREAK
                g = gen(x, items)
                first = next(g)
                BREAK
                n = len(items)
                BREAK
                return first, n, seen, list(g)
            return fn, lambda: None

        def args():
            return torch.randn(2), []
    """,
    "generator_reads_changed_state": """
        def gen(state):
            for i in range(3):
                yield state["v"] * i

        def make():
            def fn(x, state):
                out = []
                for v in gen(state):
                    out.append(v)
                    state["v"] = state["v"] + x
                    BREAK
                BREAK
                BREAK
                return out
            return fn, lambda: None

        def args():
            return torch.randn(2), {"v": torch.randn(2)}
    """,
    "module_parameter_count": """
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.l = torch.nn.Linear(5, 3)

            def forward(self, x):
                n = sum(p.numel() for p in self.parameters())
                BREAK
                y = self.l(x) * n
                BREAK
                m = sum(1 for _ in self.parameters())
                BREAK
                return y + m

        MOD = None

        def make():
            global MOD
            torch.manual_seed(0)
            MOD = M()
            return MOD, lambda: None

        def args():
            return (torch.randn(2, 5),)
    """,
    "iterators_shared_and_resumed": """
        def make():
            def fn(x, lst, it_in):
                it = iter(lst)
                it2 = it
                BREAK
                a = next(it)
                b = next(it2)
                BREAK
                lst.append(x * 5)
                c = next(it)
                d = next(it_in)
                BREAK
                rest = [t for t in it]
                return x + a + b * 2 + c * 3 + d, rest, next(it2, None), it_in
            return fn, lambda: None

        def args():
            lst = [torch.randn(2) for _ in range(4)]
            return torch.randn(2), lst, iter((torch.randn(2), torch.randn(2), torch.randn(2)))
    """,
    "iterator_consumed_by_builtins": """
        def make():
            def fn(x):
                it = iter([1, 2, 3, 0, 5])
                a = sum(it)
                b = sum(it)
                BREAK
                it2 = iter([0, 0, 3, 4])
                c = any(it2)
                BREAK
                rest = list(it2)
                BREAK
                return x * (a + b + c), rest
            return fn, lambda: None

        def args():
            return (torch.randn(2),)
    """,
    "container_methods": """
        def make():
            def fn(x, items, d):
                items.remove(items[0])
                items += [x]
                BREAK
                items[1:3] = [x * 2]
                d.setdefault("z", x)
                BREAK
                del d["a"]
                d["a"] = x + 3
                items *= 2
                BREAK
                k = d.popitem()
                items.reverse()
                d |= {"q": x}
                return k
            return fn, lambda: None
        def args():
            return torch.randn(2), [torch.randn(2) for _ in range(4)], {"a": 1, "b": torch.randn(2)}
    """,
    "nested_containers": """
        def make():
            def fn(x, d, lst):
                d["lst"].append(x)
                lst[0]["k"] = x * 2
                BREAK
                inner = d["lst"]
                d["lst"] = [x]
                inner.append(x + 1)
                BREAK
                lst[0] = {"k": inner}
                BREAK
                return len(inner)
            return fn, lambda: None
        def args():
            return torch.randn(2), {"lst": [torch.randn(2)]}, [{"k": 1}, {"k": 2}]
    """,
    "module_cache_list": """
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.cache = []
                self.stats = {"n": 0}
            def forward(self, x):
                self.cache.append(x * 2)
                BREAK
                self.stats["n"] = self.stats["n"] + 1
                BREAK
                y = self.cache[-1] + self.stats["n"]
                BREAK
                return y
        def make():
            m = M()
            return m, lambda: (m.cache, m.stats)
        def args():
            return (torch.randn(2),)
    """,
    "helper_writes_global_and_returns_closure": """
        G = 0
        def helper(x):
            global G
            G = G + 1
            s = x * G
            def inner(y):
                return y + s
            return inner
        def make():
            def fn(x):
                f = helper(x)
                BREAK
                g = helper(x + 1)
                BREAK
                return f, g
            return fn, lambda: G
        def args():
            return (torch.randn(3),)
    """,
    "exception_after_effects": """
        def make():
            def fn(x, items):
                items.append(x)
                BREAK
                try:
                    items.append(x * 2)
                    raise ValueError("boom")
                except ValueError:
                    items.append(x * 3)
                BREAK
                items.append(x * 4)
                if len(items) > 3:
                    raise KeyError("out")
                return x
            return fn, lambda: None
        def args():
            return torch.randn(2), []
    """,
    "inplace_in_list": """
        def make():
            def fn(x, items):
                items[0].add_(x)
                BREAK
                y = items[0] * 2
                items[1].mul_(y)
                BREAK
                return items[0]
            return fn, lambda: None
        def args():
            return torch.randn(2), [torch.randn(2), torch.randn(2)]
    """,
    "enumerate_zip_over_generator": """
        def gen(state):
            for i in range(3):
                yield state["v"] * i
        def make():
            def fn(x, state):
                out = []
                for i, v in enumerate(gen(state)):
                    out.append(v + i)
                    state["v"] = state["v"] + x
                    BREAK
                for a, b in zip(gen(state), [1, 2, 3]):
                    state["v"] = state["v"] * 2
                    out.append(a * b)
                BREAK
                BREAK
                return out
            return fn, lambda: None
        def args():
            return torch.randn(2), {"v": torch.randn(2)}
    """,
    "map_with_effects": """
        def make():
            def fn(x, items):
                m = map(lambda v: items.append(v) or v * 2, [x, x + 1])
                n = len(items)
                BREAK
                out = list(m)
                BREAK
                BREAK
                return n, out, len(items)
            return fn, lambda: None
        def args():
            return torch.randn(2), []
    """,
    "delete_deref_and_partial": """
        import functools
        def make():
            def fn(x):
                s = x * 2
                def add(a, b):
                    return a + b + s
                p = functools.partial(add, x)
                BREAK
                s = s + 1
                BREAK
                return p
            return fn, lambda: None
        def args():
            return (torch.randn(3),)
    """,
    "lazy_builtins_share_iterators": """
        def gen(xs):
            for t in xs:
                yield t * 2
        def make():
            def fn(x, lst):
                it = iter(lst)
                pairs = list(zip(it, [1]))
                a = next(it)
                BREAK
                for i, v in enumerate(it):
                    if i == 1:
                        break
                b = next(it)
                BREAK
                g = gen(lst)
                big = filter(lambda t: t.sum() > -100, g)
                c = next(big)
                d = next(g)
                m = map(lambda t: t + 1, g)
                e = next(m)
                BREAK
                return pairs, a, b, c, d, e, list(m), list(g), next(it, None)
            return fn, lambda: None
        def args():
            return torch.randn(2), [torch.randn(2) for _ in range(9)]
    """,
    "returns_generator_and_defaults_closure": """
        def make():
            def fn(x, xs):
                s = x.sum()
                BREAK
                def inner(y, s=s, *, k=x * 2):
                    return y + s + k
                g = (t * s for t in xs)
                BREAK
                first = next(g)
                BREAK
                return inner, g, first
            return fn, lambda: None
        def args():
            return torch.randn(3), [torch.randn(3) for _ in range(3)]
    """,
    "function_attribute_writes": """
        def helper(x):
            return x + 1
        helper.calls = 0
        def make():
            def fn(x):
                helper.calls += 1
                BREAK
                y = helper(x) * helper.calls
                BREAK
                fn.last = y
                BREAK
                return y
            return fn, lambda: (helper.calls, getattr(fn, "last", None))
        def args():
            return (torch.randn(3),)
    """,
    "closure_escapes_into_container_then_rebound": """
        def make():
            def fn(x, out):
                k = x * 2
                out.append(lambda: k)
                BREAK
                k = k + 1
                BREAK
                out.append(lambda: k * 2)
                k = k * 3
                BREAK
                return len(out)
            return fn, lambda: None
        def args():
            return torch.randn(3), []
    """,
    "generator_under_grad_modes": """
        def gen(w, xs):
            for t in xs:
                yield t * w
        def make():
            def fn(w, xs):
                g = gen(w, xs)
                a = next(g)
                with torch.no_grad():
                    b = next(g)
                BREAK
                c = next(g)
                BREAK
                BREAK
                return a.requires_grad, b.requires_grad, c.requires_grad, a + b + c
            return fn, lambda: None
        def args():
            return torch.randn(2, requires_grad=True), [torch.randn(2) for _ in range(3)]
    """,
    "dict_iterated_and_resized": """
        def make():
            def fn(x, d, grow):
                out = x
                for k in d:
                    out = out + d[k]
                    BREAK
                    if grow and k == "b":
                        d["z"] = x
                BREAK
                it = iter(d)
                first = next(it)
                BREAK
                return out, first, list(it)
            return fn, lambda: None

        N = [0]

        def args():
            N[0] += 1
            return torch.randn(2), {"a": torch.randn(2), "b": torch.randn(2)}, N[0] % 2 == 0
    """,
}
