"""What the compile probe captured, as plain records (no torch): the assembly's input.

Sites are already resolved by the probe (``"file:line"``, relative to the working directory like
every site of the document); ``user`` says whether a frame lies in the user's own code.
"""

from __future__ import annotations

from msgspec import Struct, field


class Frame(Struct, frozen=True):
    """One frame of a stack: its site, function name, and whether it is the user's code."""

    site: str
    name: str
    user: bool


class CallRecord(Struct):
    """A ``torch.compile`` / ``Module.compile`` call as the script wrote it."""

    site: str | None  # the user's line that called it
    target: str  # what it compiles: a function's or a module class's name ("" for a decorator)
    backend: str
    mode: str
    dynamic: bool | None
    fullgraph: bool
    # (file, first line, name) of the code objects this call compiles (a function's code, a
    # module's forward, Module._call_impl for Module.compile), to tell frames apart
    codes: list[tuple[str, int, str]] = field(default_factory=list)
    module_method: bool = False  # Module.compile() (it compiles the module's _call_impl)
    library_code: bool = False  # every code object it compiles is torch's or a package's
    # Module.compile() of torch's own module on a torch whose Dynamo skips it (before 2.14)
    compiles_nothing: bool = False


class FrameRecord(Struct):
    """One compile of one frame (Dynamo's CompilationMetrics record, the fields gpuopt reads)."""

    compile_id: str  # "F/A": frame F, attempt A (A > 0: a recompile)
    name: str  # the code object's name (a resume function: torch_dynamo_resume_in_X_at_N)
    filename: str
    firstlineno: int
    site: str | None  # file:firstlineno, relative, for user code; None for library code
    user: bool
    start_s: float  # wall clock (time.time() seconds)
    duration_s: float
    step: int  # the step in progress when it started (0-based; the step count after the run)
    graph_ops: int | None = None
    has_graph: bool = True
    recompile_reason: str | None = None
    fail_type: str | None = None
    fail_reason: str | None = None
    is_forward: bool = True
    is_runtime: bool = False
    called_from: str | None = None  # the user's line outside the frame that called it

    @property
    def frame_id(self) -> str:
        return self.compile_id.split("/")[0] if "/" in self.compile_id else self.compile_id

    @property
    def attempt(self) -> int:
        tail = self.compile_id.rsplit("/", 1)[-1]
        return int(tail) if tail.isdigit() else 0


class BreakRecord(Struct):
    """One graph break Dynamo logged while compiling: its type, explanation and the user stack."""

    compile_id: str
    gb_type: str  # Dynamo's graph-break type ("Unsupported Tensor.item() call ...")
    explanation: str  # the first line of its explanation
    hints: list[str]
    stack: list[Frame]  # outermost first (the frame being compiled, then what it inlined)
    frame_name: str  # the code object Dynamo was compiling
    step: int
    code: str | None = None  # the source line at the innermost user frame


class WindowCounts(Struct):
    """One step's compiled regions, counted from a CPU profile of it (:mod:`regions`)."""

    step: int
    regions: int  # compiled frames entered ("Torch-Compiled Region: F/A")
    graph_calls: int | None  # compiled graphs run (CompiledFunction, "## Call CompiledFxGraph")
    eager_ops: int | None  # top-level ops inside compiled regions, outside graphs
    outside_ops: int  # top-level ops outside any compiled region
    note: str | None = None


class CompileCapture(Struct):
    """Everything the probe saw; ``steps``: how many steps the run had."""

    calls: list[CallRecord] = field(default_factory=list)
    frames: list[FrameRecord] = field(default_factory=list)
    breaks: list[BreakRecord] = field(default_factory=list)
    window: WindowCounts | None = None
    import_s: float | None = None  # importing torch._dynamo, when the run imported it
    dynamo_loaded: bool = False  # torch._dynamo was imported while the script ran (or before)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    guard_sites: dict[str, str] = field(default_factory=dict)  # compile id -> the guard's line
