"""The four small codemods (DataLoader keywords, non-blocking copies, zero_grad, backend flags)
on before/after pairs with the exact expected text: what each changes (one note per change),
what it leaves and the reason it gives, formatting and comments kept, idempotence, parse errors;
and, for the DataLoader and zero_grad rewrites, old and new source run side by side."""

from __future__ import annotations

import textwrap
from collections.abc import Callable

import pytest
import torch

from gpuopt.fixes.backend_flags.codemod import rewrite_backend_flags
from gpuopt.fixes.dataloader.codemod import rewrite_dataloader
from gpuopt.fixes.pinned_copies.codemod import rewrite_copies
from gpuopt.fixes.zero_grad import find_zero_grad_false, rewrite_zero_grad
from gpuopt.source import CodemodError, Rewrite, Skipped

W4 = {"num_workers": 4, "persistent_workers": True}


def src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# -- dataloader ------------------------------------------------------------------------------
DATALOADER_PAIRS = [
    (  # one line: appended, the comment kept
        "dl = DataLoader(ds, batch_size=4)  # keep\n",
        "dl = DataLoader(ds, batch_size=4, num_workers=4, persistent_workers=True)  # keep\n",
    ),
    (  # any callee ending in .DataLoader; a literal keyword replaced in place
        "dl = torch.utils.data.DataLoader(ds, num_workers=0, shuffle=True)\n",
        "dl = torch.utils.data.DataLoader(ds, num_workers=4, shuffle=True, "
        "persistent_workers=True)\n",
    ),
    (  # num_workers given positionally (the 6th argument): replaced in place
        "dl = DataLoader(ds, 4, True, None, None, 0)\n",
        "dl = DataLoader(ds, 4, True, None, None, 4, persistent_workers=True)\n",
    ),
    (  # one argument a line with a trailing comma: each new one on its own line, comma kept
        src(
            """
            dl = DataLoader(
                ds,
                batch_size=4,  # per step
                shuffle=True,  # every epoch
            )
            """
        ),
        src(
            """
            dl = DataLoader(
                ds,
                batch_size=4,  # per step
                shuffle=True,  # every epoch
                num_workers=4,
                persistent_workers=True,
            )
            """
        ),
    ),
    (  # aligned under the parenthesis, no trailing comma: none added
        src(
            """
            dl = DataLoader(ds,
                            batch_size=4,
                            persistent_workers=False)  # last
            """
        ),
        src(
            """
            dl = DataLoader(ds,
                            batch_size=4,
                            persistent_workers=True,
                            num_workers=4)  # last
            """
        ),
    ),
    (  # a single argument on its own line
        "dl = DataLoader(\n    ds\n)\n",
        "dl = DataLoader(\n    ds,\n    num_workers=4,\n    persistent_workers=True\n)\n",
    ),
    (  # several arguments on one line inside a multi-line call: appended on that line
        "dl = DataLoader(\n    ds, batch_size=4\n)\n",
        "dl = DataLoader(\n    ds, batch_size=4, num_workers=4, persistent_workers=True\n)\n",
    ),
]


@pytest.mark.parametrize(
    ("before", "after"),
    DATALOADER_PAIRS,
    ids=["one-line", "attribute", "positional", "per-line", "aligned", "single", "one-row"],
)
def test_dataloader_pairs(before: str, after: str) -> None:
    r = rewrite_dataloader(before, [1], W4)
    assert r.source == after
    assert len(r.notes) == 1 and r.notes[0].startswith("line 1: DataLoader(")
    assert r.skipped == []
    again = rewrite_dataloader(r.source, [1], W4)  # idempotent
    assert again.source == r.source and again.notes == [] and again.skipped == []


def test_dataloader_note_lists_the_changes_and_a_call_is_found_by_any_of_its_lines() -> None:
    before = src(
        """
        import torch

        train = torch.utils.data.DataLoader(
            ds,
            batch_size=64,
            pin_memory=False,
        )
        """
    )
    r = rewrite_dataloader(before, [5], {**W4, "pin_memory": True, "prefetch_factor": 2})
    assert r.notes == [
        "line 3: DataLoader(num_workers=4, persistent_workers=True, pin_memory=True, "
        "prefetch_factor=2)"
    ]
    assert r.source == src(
        """
        import torch

        train = torch.utils.data.DataLoader(
            ds,
            batch_size=64,
            pin_memory=True,
            num_workers=4,
            persistent_workers=True,
            prefetch_factor=2,
        )
        """
    )


def test_dataloader_knob_from_an_expression_is_left_and_the_others_applied() -> None:
    before = "dl = DataLoader(ds, num_workers=args.workers, pin_memory=False)\n"
    r = rewrite_dataloader(before, [1], {**W4, "pin_memory": True})
    assert r.source == "dl = DataLoader(ds, num_workers=args.workers, pin_memory=True)\n"
    assert r.notes == ["line 1: DataLoader(pin_memory=True)"]
    assert r.skipped == [
        Skipped(1, "num_workers comes from `args.workers`: set it to 4 where that is set"),
        Skipped(
            1,
            "persistent_workers left: it needs num_workers > 0, and num_workers comes from "
            "`args.workers`",
        ),
    ]


def test_dataloader_positional_expression_and_splats() -> None:
    positional = rewrite_dataloader("dl = DataLoader(ds, bs, True, None, None, n)\n", [1], W4)
    assert positional.skipped[0] == Skipped(
        1, "num_workers comes from `n`: set it to 4 where that is set"
    )
    kwargs = rewrite_dataloader("dl = DataLoader(ds, **kw)\n", [1], {"pin_memory": True})
    assert not kwargs.changed
    assert kwargs.skipped == [
        Skipped(1, "pin_memory may come from the **kwargs splat: set it to True there")
    ]
    # given explicitly, a knob is set even beside a splat
    explicit = rewrite_dataloader("dl = DataLoader(ds, num_workers=0, **kw)\n", [1], W4)
    assert explicit.source == "dl = DataLoader(ds, num_workers=4, **kw)\n"
    assert explicit.skipped == [
        Skipped(1, "persistent_workers may come from the **kwargs splat: set it to True there")
    ]
    star = rewrite_dataloader("dl = DataLoader(ds, *rest)\n", [1], {"num_workers": 4})
    assert star.skipped == [
        Skipped(1, "num_workers may come from the *args splat: set it to 4 there")
    ]


def test_dataloader_worker_only_knobs_never_added_with_zero_workers() -> None:
    before = "dl = DataLoader(ds, batch_size=4)\n"
    r = rewrite_dataloader(before, [1], {"persistent_workers": True, "prefetch_factor": 2})
    assert r.source == before and not r.changed
    assert [s.reason for s in r.skipped] == [
        "persistent_workers left: the loader runs with num_workers=0, and persistent_workers "
        "needs worker processes",
        "prefetch_factor left: the loader runs with num_workers=0, and prefetch_factor needs "
        "worker processes",
    ]
    zero = rewrite_dataloader("dl = DataLoader(ds, num_workers=2)\n", [1], {**W4, "num_workers": 0})
    assert zero.source == "dl = DataLoader(ds, num_workers=0)\n"
    assert [s.reason.split(":")[0] for s in zero.skipped] == ["persistent_workers left"]


def test_dataloader_only_targeted_lines_and_a_line_without_a_call() -> None:
    before = "a = DataLoader(ds)\nb = DataLoader(ds)\nx = 1\n"
    r = rewrite_dataloader(before, [2, 3], {"num_workers": 2})
    assert r.source == "a = DataLoader(ds)\nb = DataLoader(ds, num_workers=2)\nx = 1\n"
    assert r.notes == ["line 2: DataLoader(num_workers=2)"]
    assert r.skipped == [Skipped(3, "no DataLoader(...) call on this line")]


def test_dataloader_rewrite_runs_with_the_new_settings_and_the_same_batches() -> None:
    before = src(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        ds = TensorDataset(torch.arange(48.0).reshape(24, 2), torch.arange(24))
        loader = DataLoader(TensorDataset(*ds.tensors), batch_size=4)
        """
    )
    settings = {"num_workers": 2, "persistent_workers": True, "prefetch_factor": 3}
    r = rewrite_dataloader(before, [5], settings)
    assert r.changed and r.skipped == []
    old: dict[str, object] = {}
    new: dict[str, object] = {}
    exec(compile(before, "old.py", "exec"), old)
    exec(compile(r.source, "new.py", "exec"), new)
    loader_old, loader_new = old["loader"], new["loader"]
    assert isinstance(loader_old, torch.utils.data.DataLoader)
    assert isinstance(loader_new, torch.utils.data.DataLoader)
    assert loader_old.num_workers == 0
    assert (loader_new.num_workers, loader_new.persistent_workers) == (2, True)
    assert loader_new.prefetch_factor == 3
    batches_old, batches_new = list(loader_old), list(loader_new)
    assert len(batches_old) == len(batches_new) == 6
    for a, b in zip(batches_old, batches_new, strict=True):
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    del loader_new, new  # the persistent workers go with the loader


# -- copies ------------------------------------------------------------------------------------
def test_copies_pairs() -> None:
    before = src(
        """
        x = x.to(device)  # batch
        y = y.cuda()
        v = v.to(dev, non_blocking=False)
        w = w.cuda(0, False)
        z = z.to(dev).to(torch.float16)
        t = t.to(
            dev
        )
        u = u.to(device)
        """
    )
    r = rewrite_copies(before, [1, 2, 3, 4, 5, 7])
    assert r.source == src(
        """
        x = x.to(device, non_blocking=True)  # batch
        y = y.cuda(non_blocking=True)
        v = v.to(dev, non_blocking=True)
        w = w.cuda(0, True)
        z = z.to(dev, non_blocking=True).to(torch.float16)
        t = t.to(
            dev, non_blocking=True
        )
        u = u.to(device)
        """
    )  # line 9 was not targeted
    assert r.notes == [
        "line 1: .to(..., non_blocking=True)",
        "line 2: .cuda(..., non_blocking=True)",
        "line 3: .to(..., non_blocking=True)",
        "line 4: .cuda(..., non_blocking=True)",
        "line 5: .to(..., non_blocking=True)",
        "line 6: .to(..., non_blocking=True)",
    ]
    assert r.skipped == []
    again = rewrite_copies(r.source, [1, 2, 3, 4, 5, 7])
    assert again.source == r.source and again.notes == [] and again.skipped == []


def test_copies_left_alone_with_their_reasons() -> None:
    before = src(
        """
        a = a.to(torch.float16)
        b = b.to(compute_dtype)
        c = c.to(dtype=torch.bfloat16)
        d = d.to("cpu")
        e = e.to(torch.device("cpu"))
        f = f.to(device="cpu")
        g = g.to(dev, non_blocking=args.nb)
        h = h.to(*where)
        print("no copy here")
        """
    )
    r = rewrite_copies(before, range(1, 10))
    assert r.source == before and not r.changed
    reasons = {s.line: s.reason for s in r.skipped}
    assert reasons == {
        1: "`.to(torch.float16)` converts the dtype and copies nothing between devices: "
        "non_blocking does not apply",
        2: "`.to(compute_dtype)` converts the dtype and copies nothing between devices: "
        "non_blocking does not apply",
        3: "`.to(dtype=torch.bfloat16)` converts the dtype and copies nothing between devices: "
        "non_blocking does not apply",
        4: '`.to("cpu")` copies to the CPU: with non_blocking=True the result could be read '
        "before it arrives, so it stays blocking",
        5: '`.to(torch.device("cpu"))` copies to the CPU: with non_blocking=True the result '
        "could be read before it arrives, so it stays blocking",
        6: '`.to("cpu")` copies to the CPU: with non_blocking=True the result could be read '
        "before it arrives, so it stays blocking",
        7: "non_blocking comes from `args.nb`: set it to True where that is set",
        8: "the .to(...) arguments come from a splat: pass non_blocking=True where they are built",
        9: "no .to(device) / .cuda() copy on this line",
    }


# -- zero_grad ---------------------------------------------------------------------------------
def test_zero_grad_pairs_and_planning_lines() -> None:
    before = src(
        """
        opt.zero_grad(set_to_none=False)  # every step
        model.zero_grad(False)
        opt.zero_grad()
        opt.zero_grad(
            set_to_none=False,
        )
        """
    )
    assert find_zero_grad_false(before) == [1, 2, 4]
    r = rewrite_zero_grad(before)
    assert r.source == src(
        """
        opt.zero_grad(set_to_none=True)  # every step
        model.zero_grad(set_to_none=True)
        opt.zero_grad()
        opt.zero_grad(
            set_to_none=True,
        )
        """
    )
    assert r.notes == [
        "line 1: zero_grad(set_to_none=True)",
        "line 2: zero_grad(set_to_none=True)",
        "line 4: zero_grad(set_to_none=True)",
    ]
    assert find_zero_grad_false(r.source) == []
    again = rewrite_zero_grad(r.source)
    assert again.source == r.source and again.notes == [] and again.skipped == []


def test_zero_grad_only_the_given_lines() -> None:
    before = "opt.zero_grad(False)\nopt.zero_grad(\n    False)\nx = 1\n"
    r = rewrite_zero_grad(before, [3, 4])  # the second call, by its second line
    assert r.source == "opt.zero_grad(False)\nopt.zero_grad(\n    set_to_none=True)\nx = 1\n"
    assert r.notes == ["line 2: zero_grad(set_to_none=True)"]
    assert r.skipped == [Skipped(4, "no zero_grad(...) call on this line")]
    flag = rewrite_zero_grad("opt.zero_grad(set_to_none=keep)\n", [1])
    assert flag.skipped == [
        Skipped(1, "set_to_none comes from `keep`: set it to True where that is set")
    ]


@pytest.mark.parametrize(
    "read",
    ["total = p.grad.norm()", "if p.grad is None:\n    pass", "p.grad += 1"],
    ids=["method", "is-none", "augmented"],
)
def test_zero_grad_left_when_gradients_are_read(read: str) -> None:
    before = f"opt.zero_grad(set_to_none=False)\nx = 1\n{read}\nopt.zero_grad(False)\n"
    r = rewrite_zero_grad(before)
    assert r.source == before and not r.changed
    why = "gradients are read at line 3: with set_to_none=True they would be None, not zeros"
    assert r.skipped == [Skipped(1, why), Skipped(len(before.splitlines()), why)]


def test_zero_grad_writes_and_autograd_grad_are_not_reads() -> None:
    before = src(
        """
        opt.zero_grad(set_to_none=False)
        g = torch.autograd.grad(loss, x)
        p.grad = None
        del q.grad
        """
    )
    r = rewrite_zero_grad(before)
    assert r.changed and r.source.startswith("opt.zero_grad(set_to_none=True)\n")


def test_zero_grad_rewrite_trains_the_same() -> None:
    def train(code: str) -> list[torch.Tensor]:
        ns: dict[str, object] = {}
        exec(compile(code, "train.py", "exec"), ns)
        model = ns["model"]
        assert isinstance(model, torch.nn.Module)
        return [p.detach().clone() for p in model.parameters()]

    before = src(
        """
        import torch

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
        data = torch.randn(3, 8, 3)
        for step in range(3):
            opt.zero_grad(set_to_none=False)
            model(data[step]).square().mean().backward()
            opt.step()
        """
    )
    r = rewrite_zero_grad(before)
    assert r.notes == ["line 8: zero_grad(set_to_none=True)"]
    old, new = train(before), train(r.source)
    assert all(torch.equal(a, b) for a, b in zip(old, new, strict=True))
    torch.manual_seed(0)
    initial = torch.nn.Linear(3, 4).weight.detach()  # the script's first layer before training
    assert old[0].shape == initial.shape and not torch.equal(old[0], initial)  # steps were taken


# -- backend flags -----------------------------------------------------------------------------
BENCH = {"torch.backends.cudnn.benchmark": True}


def test_backend_flag_inserted_after_the_last_import() -> None:
    before = src(
        '''
        """Doc."""
        from __future__ import annotations

        import os
        import torch  # the framework

        def main():
            pass

        if __name__ == "__main__":
            import sys
            main()
        '''
    )
    r = rewrite_backend_flags(before, BENCH)
    assert r.source == before.replace(
        "import torch  # the framework\n",
        "import torch  # the framework\ntorch.backends.cudnn.benchmark = True\n",
    )
    assert r.notes == ["line 6: torch.backends.cudnn.benchmark = True (added after the imports)"]
    again = rewrite_backend_flags(r.source, BENCH)
    assert again.source == r.source and again.notes == [] and again.skipped == []


def test_backend_flags_add_import_torch_when_missing() -> None:
    flags = {"torch.backends.cuda.matmul.allow_tf32": True, "torch.backends.cudnn.allow_tf32": True}
    r = rewrite_backend_flags("import os\n\nx = 1\n", flags)
    assert r.source == (
        "import os\nimport torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
        "torch.backends.cudnn.allow_tf32 = True\n\nx = 1\n"
    )
    assert r.notes == [
        "line 2: import torch (added after the imports)",
        "line 3: torch.backends.cuda.matmul.allow_tf32 = True (added after the imports)",
        "line 4: torch.backends.cudnn.allow_tf32 = True (added after the imports)",
    ]
    assert rewrite_backend_flags(r.source, flags).notes == []


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("x = 1\n", "import torch\ntorch.backends.cudnn.benchmark = True\nx = 1\n"),
        (
            '"""Doc."""\nx = 1\n',
            '"""Doc."""\nimport torch\ntorch.backends.cudnn.benchmark = True\nx = 1\n',
        ),
    ],
    ids=["bare", "docstring"],
)
def test_backend_flags_without_imports(before: str, after: str) -> None:
    r = rewrite_backend_flags(before, BENCH)
    assert r.source == after
    assert r.notes[-1].endswith("torch.backends.cudnn.benchmark = True (added at the top)")


def test_backend_flag_replaced_in_place_also_through_an_import_alias() -> None:
    before = "import torch\ntorch.backends.cudnn.benchmark = False  # was slow?\nx = 1\n"
    r = rewrite_backend_flags(before, BENCH)
    assert r.source == before.replace("= False", "= True")
    assert r.notes == ["line 2: torch.backends.cudnn.benchmark = True"]
    alias = "from torch.backends import cudnn\n\ncudnn.benchmark = 0\n"
    r = rewrite_backend_flags(alias, BENCH)
    assert r.source == "from torch.backends import cudnn\n\ncudnn.benchmark = True\n"
    unchanged = "import torch\ntorch.backends.cudnn.benchmark = True\n"
    assert rewrite_backend_flags(unchanged, BENCH) == Rewrite(unchanged, [], [])


def test_backend_flag_skips() -> None:
    before = src(
        """
        import torch
        torch.backends.cudnn.benchmark = args.benchmark

        def deterministic():
            torch.backends.cuda.matmul.allow_tf32 = False
        """
    )
    flags = {**BENCH, "torch.backends.cuda.matmul.allow_tf32": True}
    r = rewrite_backend_flags(before, flags)
    assert r.skipped == [
        Skipped(
            2,
            "torch.backends.cudnn.benchmark is set from `args.benchmark`: set it to True there",
        ),
        Skipped(
            5,
            "torch.backends.cuda.matmul.allow_tf32 is set to `False` inside a block here: left "
            "as is; when it runs it overrides torch.backends.cuda.matmul.allow_tf32 = True set "
            "at the top",
        ),
    ]
    assert r.source == before.replace(
        "import torch\n", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"
    )
    again = rewrite_backend_flags(r.source, flags)
    assert again.source == r.source and again.notes == []
    assert again.skipped == [Skipped(s.line + 1, s.reason) for s in r.skipped]  # one line down


# -- parse errors ------------------------------------------------------------------------------
CODEMODS: list[Callable[[str], Rewrite]] = [
    lambda s: rewrite_dataloader(s, [1], W4, name="train.py"),
    lambda s: rewrite_copies(s, [1], name="train.py"),
    lambda s: rewrite_zero_grad(s, None, name="train.py"),
    lambda s: rewrite_backend_flags(s, BENCH, name="train.py"),
]


@pytest.mark.parametrize("codemod", CODEMODS, ids=["dataloader", "copies", "zero_grad", "flags"])
def test_unparsable_source_is_a_one_line_error(codemod: Callable[[str], Rewrite]) -> None:
    with pytest.raises(CodemodError, match=r"^train.py: cannot be parsed at line 2") as info:
        codemod("x = 1\ndef (:\n")
    assert "\n" not in str(info.value)
    with pytest.raises(CodemodError):
        find_zero_grad_false("x = (\n")


# -- imports added by the rewrites -------------------------------------------------------------
@pytest.mark.parametrize(
    ("before", "after"),
    [
        (  # after the last import before the main guard, never inside it
            'import os\n\nif __name__ == "__main__":\n    import sys\n',
            'import os\nfrom gpuopt.batching import pad_collate\n\nif __name__ == "__main__":\n'
            "    import sys\n",
        ),
        (  # a docstring written in two parts stays the module's docstring
            '"""Doc""" "string."\nx = 1\n',
            '"""Doc""" "string."\nfrom gpuopt.batching import pad_collate\nx = 1\n',
        ),
        (  # a name imported already is not imported again
            "from gpuopt.batching import pad_collate\n",
            "from gpuopt.batching import pad_collate\n",
        ),
    ],
    ids=["main-guard", "concatenated-docstring", "already"],
)
def test_from_import_goes_after_the_imports(before: str, after: str) -> None:
    import libcst as cst

    from gpuopt.source.imports import add_from_import

    assert add_from_import(cst.parse_module(before), "gpuopt.batching", ["pad_collate"]).code == (
        after
    )


# -- dataloader: the training's threads ------------------------------------------------------
def test_dataloader_threads_are_set_once_after_the_imports() -> None:
    """``threads``: ``torch.set_num_threads(N)`` after the last top-level import, one note a
    line; run again, nothing; another count replaces the literal in place."""
    before = src(
        """
        import torch
        from torch.utils.data import DataLoader

        def main():
            dl = DataLoader(ds, batch_size=4)
        """
    )
    r = rewrite_dataloader(before, [5], {"num_workers": 4}, threads=1)
    assert r.source == src(
        """
        import torch
        from torch.utils.data import DataLoader
        torch.set_num_threads(1)

        def main():
            dl = DataLoader(ds, batch_size=4, num_workers=4)
        """
    )
    assert r.notes == [
        "line 5: DataLoader(num_workers=4)",
        "line 3: torch.set_num_threads(1) (added after the imports)",
    ]
    again = rewrite_dataloader(r.source, [6], {"num_workers": 4}, threads=1)
    assert again.source == r.source and again.notes == [] and again.skipped == []
    two = rewrite_dataloader(r.source, [6], {"num_workers": 4}, threads=2)
    assert "torch.set_num_threads(2)\n" in two.source and "set_num_threads(1)" not in two.source
    assert two.notes == ["line 3: torch.set_num_threads(2)"]


def test_dataloader_threads_import_torch_where_the_module_does_not() -> None:
    r = rewrite_dataloader(
        "from torch.utils.data import DataLoader\ndl = DataLoader(ds)\n",
        [2],
        {"num_workers": 2},
        threads=1,
    )
    assert r.source == (
        "from torch.utils.data import DataLoader\nimport torch\ntorch.set_num_threads(1)\n"
        "dl = DataLoader(ds, num_workers=2)\n"
    )


def test_dataloader_threads_the_script_sets_itself_are_left() -> None:
    """A ``set_num_threads`` call inside a function, or from an expression, is the script's
    own choice: left, and the reason names its line; the DataLoader keywords still set."""
    before = src(
        """
        import torch

        def main(n):
            torch.set_num_threads(n)
            dl = DataLoader(ds)
        """
    )
    r = rewrite_dataloader(before, [5], {"num_workers": 2}, threads=1)
    assert "set_num_threads(n)" in r.source and "set_num_threads(1)" not in r.source
    assert r.notes == ["line 5: DataLoader(num_workers=2)"]
    assert r.skipped == [
        Skipped(
            5,
            "the script sets its threads at line 4 (`torch.set_num_threads(n)`): "
            "set_num_threads(1) there",
        )
    ]
    assert rewrite_dataloader("x = 1\n", [1], {"num_workers": 2}, threads=1).source == "x = 1\n"
