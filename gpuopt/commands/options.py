"""Every command's arguments and options, declared once.

typer's commands are built from these declarations (:func:`gpuopt.commands.cli.typer_command`),
and the console entry point's fast path parses with them (:func:`gpuopt.commands.entry.parse_fast`),
so that both give a command the same values: a dict from each declaration's ``dest`` to its value
(the default where not given). Adding an option to a command is one :class:`Opt` here, then
reading ``values[dest]`` where the command runs.

Import-light (typing and constants only): the fast path imports it before anything else, and
its declarations are named tuples, quicker to make than dataclasses.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from gpuopt.defaults import (
    NPROC_MAX,
    OPTIMIZE_SEED,
    OPTIMIZE_STEPS,
    SAMPLE_INTERVAL_S,
    SEED_MAX,
    WARMUP_STEPS,
    WINDOW_MAX_STEPS,
    WINDOW_STEPS,
)
from gpuopt.gate.settings import SETTINGS

REQUIRED = ...  # an option's or argument's default when the command line must give it

Kind = Literal["value", "repeat", "flag", "switch"]


class Opt(NamedTuple):
    """One option. ``kind``: ``value`` takes one value at most once; ``repeat`` once per use
    (``--allow A --allow B``, a list); ``flag`` is a bool (``--quiet``); ``switch`` a bool from a
    pair (``flags``: ``("--strict", "--no-strict")``), None where neither is given and the
    default is None."""

    dest: str  # the name of its value: the command function's parameter
    flags: tuple[str, ...]  # ("-o", "--out"), in the order --help lists them
    kind: Kind = "value"
    type: Literal["str", "int", "float"] = "str"
    default: object = None  # REQUIRED: the command line must give it; a repeat's is ()
    help: str = ""
    metavar: str | None = None
    choices: tuple[str, ...] = ()  # --format text|md|json: the only values taken
    min: float | None = None  # the range of a number (typer's min= and max=)
    max: float | None = None
    hidden: bool = False  # not in --help
    panel: str | None = None  # a heading of --help's (shown where help is rich)
    fast: bool = False  # the entry point's fast path takes it (a str value, a flag or a switch)

    @property
    def takes_value(self) -> bool:
        return self.kind in ("value", "repeat")


class Arg(NamedTuple):
    """The positional arguments: one (``many=False``) or a list."""

    dest: str
    metavar: str
    help: str
    many: bool = True
    required: bool = True


class Command(NamedTuple):
    name: str
    help: str
    args: tuple[Arg, ...]
    options: tuple[Opt, ...]
    # False: options come before SCRIPT, and everything after it is the script's (its own
    # options included), as with `python SCRIPT ARGS`
    interspersed: bool = True

    def by_flag(self) -> dict[str, Opt]:
        return {flag: opt for opt in self.options for flag in opt.flags}

    def valued(self) -> frozenset[str]:
        """Every flag that takes the next argument as its value."""
        return frozenset(flag for opt in self.options if opt.takes_value for flag in opt.flags)

    def repeatable(self) -> frozenset[str]:
        return frozenset(flag for opt in self.options if opt.kind == "repeat" for flag in opt.flags)

    def option(self, dest: str) -> Opt:
        (opt,) = (o for o in self.options if o.dest == dest)
        return opt

    def defaults(self) -> dict[str, object]:
        """The values of a command line that gives no option (arguments: None)."""
        values: dict[str, object] = {a.dest: None for a in self.args}
        for opt in self.options:
            default = opt.default
            if opt.kind == "repeat" and isinstance(default, tuple):
                default = list(default)  # a list of its own for each command line
            values[opt.dest] = default
        return values


DEBUG = Opt(
    "debug",
    ("--debug",),
    kind="flag",
    default=False,
    help="Debug lines on stderr (gpuopt: debug: ...), as GPUOPT_DEBUG=1 does.",
)
_SCRIPT = Arg(
    "script_and_args",
    "SCRIPT [ARGS]...",
    "The script and its own arguments.",
    required=False,
)
_MODULE = Opt("module", ("-m",), help="Run a module, as `python -m MODULE`.")
_REPORT_FORMATS = ("text", "json", "md", "html")
_TR = "torchrun (multi-process and multi-node runs)"
_CONFIG = Opt(
    "config",
    ("--config",),
    help="Settings file (default: [tool.gpuopt.check] in the nearest pyproject.toml).",
    metavar="FILE",
    fast=True,
)


def _torchrun(
    dest: str,
    help: str,
    type: Literal["str", "int"] = "str",
    low: float | None = None,
    high: float | None = None,
) -> Opt:
    """One of torchrun's own options, passed through (``--node-rank`` for ``node_rank``)."""
    flag = "--" + dest.replace("_", "-")
    return Opt(dest, (flag,), type=type, help="torchrun: " + help, min=low, max=high, panel=_TR)


PROFILE = Command(
    "profile",
    "Run SCRIPT as `python SCRIPT ARGS` would, instrumented, and explain where each step's time "
    "goes.",
    (_SCRIPT,),
    (
        _MODULE,
        Opt(
            "out",
            ("-o", "--out"),
            help="Run directory (default gpuopt-runs/<stem>-<time>).",
            metavar="DIR",
            fast=True,
        ),
        Opt("steps", ("--steps",), type="int", min=1, help="Stop cleanly after N training steps."),
        Opt(
            "warmup",
            ("--warmup",),
            type="int",
            default=WARMUP_STEPS,
            min=0,
            help="Steps left out of the statistics.",
        ),
        Opt(
            "window",
            ("--window",),
            type="int",
            default=WINDOW_STEPS,
            min=0,
            max=WINDOW_MAX_STEPS,
            help="Steps recorded in detail (ops, copies, syncs) after warm-up; 0 turns the "
            "recorder off.",
        ),
        Opt(
            "sample_interval",
            ("--sample-interval",),
            type="float",
            default=SAMPLE_INTERVAL_S,
            help="Seconds between utilization samples (NVML itself averages over 1/6–1 s).",
        ),
        Opt(
            "nproc_per_node",
            ("--nproc-per-node",),
            type="int",
            min=1,
            max=NPROC_MAX,
            help="Launch N processes through torchrun.",
        ),
        Opt(
            "quiet",
            ("--quiet",),
            kind="flag",
            default=False,
            help="No live progress and no terminal report.",
            fast=True,
        ),
        Opt(
            "fmt",
            ("--format",),
            default="text",
            choices=_REPORT_FORMATS,
            help="Terminal report format.",
        ),
        Opt(
            "force",
            ("--force",),
            kind="flag",
            default=False,
            help="Replace the profile of an earlier run in -o DIR (else refused).",
            fast=True,
        ),
        Opt(
            "fixes",
            ("--fixes",),
            help="Patch in the run-time fixes gpuopt optimize --apply recorded in DIR.",
            metavar="DIR",
        ),
        Opt(
            "seed",
            ("--seed",),
            type="int",
            min=0,
            max=SEED_MAX,
            help="Seed random, numpy and torch before the script runs.",
        ),
        Opt(
            "record_losses",
            ("--record-losses",),
            kind="flag",
            default=False,
            help="Keep every step's loss (read once at the end) and a digest of the parameters.",
        ),
        Opt(
            "measure_only",
            ("--measure-only",),
            kind="flag",
            default=False,
            hidden=True,
            help="Time the steps only (gpuopt optimize's runs): no recorder, profiler window, "
            "sampler or checkpoint.",
        ),
        Opt(
            "memory_for",
            ("--memory-for",),
            metavar="DEVICE|SIZE",
            help="Predict the step's memory on that GPU with fake tensors (no GPU needed): a "
            "device (h100, a100-40gb, h200, l4 ...) or a size (80GiB); the largest batch that "
            "fits.",
        ),
        _torchrun("nnodes", "number of nodes, N or MIN:MAX."),
        _torchrun("node_rank", "this node's rank.", "int", low=0),
        _torchrun("rdzv_backend", "rendezvous backend (c10d)."),
        _torchrun("rdzv_endpoint", "rendezvous HOST[:PORT]."),
        _torchrun("rdzv_id", "the job's id."),
        _torchrun("master_addr", "rank 0's address."),
        _torchrun("master_port", "rank 0's port.", "int", low=1, high=65535),
        _torchrun("max_restarts", "restarts on failure.", "int", low=0),
        Opt(
            "torchrun_arg",
            ("--torchrun-arg",),
            kind="repeat",
            default=(),
            help="Any other torchrun option, as one argument (--torchrun-arg=--log-dir=logs).",
            panel=_TR,
        ),
        DEBUG,
    ),
    interspersed=False,
)

RUN = Command(
    "run",
    "Run SCRIPT as `python SCRIPT ARGS` would, with the run-time fixes gpuopt optimize --apply "
    "recorded in DIR patched in, and nothing measured (the training itself).",
    (_SCRIPT,),
    (
        _MODULE,
        Opt(
            "fixes",
            ("--fixes",),
            default=REQUIRED,
            help="The directory gpuopt optimize --apply wrote (its fixes.json).",
            metavar="DIR",
        ),
        DEBUG,
    ),
    interspersed=False,
)

REPORT = Command(
    "report",
    "Render a run directory, a profile.json, or PyTorch profiler traces (file or folder of "
    "ranks); several one after another, or merged when they are one job's rank summaries or "
    "node directories. Never re-runs anything.",
    (
        Arg(
            "paths",
            "PATH...",
            "Run directory, profile.json, trace .json/.json.gz, a folder of per-rank traces, or "
            "rank summaries (*.summary.json, or folders of them); several are rendered one after "
            "another, or merged when they are one job's rank summaries or the run directories "
            "of its nodes.",
        ),
    ),
    (
        Opt(
            "fmt",
            ("--format", "-f"),
            choices=_REPORT_FORMATS,
            help="text, json, md or html (default: from -o's extension, else text).",
            fast=True,
        ),
        Opt(
            "output",
            ("-o", "--output"),
            help="Write to FILE instead of stdout (with --summary-only: a folder for the "
            "summaries).",
            metavar="FILE",
            fast=True,
        ),
        Opt(
            "summary_only",
            ("--summary-only",),
            kind="flag",
            default=False,
            help="Traces: write one small summary per rank (DIR/rank-N.summary.json, -o DIR) "
            "instead of a report; merge them later with gpuopt report DIR1 DIR2 ...",
        ),
        Opt(
            "jobs",
            ("--jobs", "-j"),
            type="int",
            min=1,
            help="Worker processes for a folder of traces (default: one per core, as memory "
            "allows).",
        ),
        DEBUG,
    ),
)

SCHEDULE = Command(
    "schedule",
    "Plan ahead-of-time multi-stream execution (Nimble) for a static model: streams, syncs, "
    "estimated speedup.",
    (
        Arg(
            "target",
            "TARGET",
            "module:factory returning an nn.Module (file.py:factory works too).",
            many=False,
        ),
    ),
    (
        Opt(
            "inputs",
            ("--inputs",),
            help="module:function returning the example inputs (a tuple).",
        ),
        Opt(
            "device_profile",
            ("--device-profile",),
            default="h100",
            help="Device cost model for the estimate: h100, a100-80gb, v100-16gb, v100-32gb (the "
            "names --memory-for takes; a100 and v100 too).",
        ),
        Opt(
            "out",
            ("-o", "--out"),
            help="Write the plan JSON here (default: <factory>.plan.json).",
            metavar="FILE",
        ),
        Opt(
            "fmt",
            ("--format",),
            default="text",
            choices=("text", "json"),
            help="text or json on stdout.",
        ),
        Opt(
            "streams",
            ("--streams",),
            default="auto",
            help="auto: the multi-stream plan only where it beats one stream (measured on a GPU, "
            "else by the cost model); multi or one: that plan.",
        ),
        DEBUG,
    ),
)

CHECK = Command(
    "check",
    "CI gate: compare CANDIDATE... with --baseline BASELINE (run directories, profile.json or "
    "traces). Repeats of the same code: several candidates, and --baseline once per baseline run "
    "(--baseline B1 --baseline B2); a bare path right after a baseline is refused. Exit 0 pass, "
    "1 regression, 2 bad input. Settings also from [tool.gpuopt.check] in pyproject.toml.",
    (Arg("candidate", "CANDIDATE...", "The run(s) to judge: repeats of the same code."),),
    (
        Opt(
            "baseline",
            ("--baseline",),
            kind="repeat",
            default=REQUIRED,
            help="A run the candidate must not be worse than; one path each, repeat it for "
            "several runs (--baseline B1 --baseline B2).",
            fast=True,
        ),
        *(Opt(s.field, ("--" + s.key,), help=s.help, fast=True) for s in SETTINGS),
        Opt(
            "allow",
            ("--allow",),
            kind="repeat",
            default=(),
            help="A new HIGH finding id that does not fail (repeatable).",
            fast=True,
        ),
        Opt(
            "gates",
            ("--gates",),
            help="Only these gates, comma-separated: step-time, data-wait, outside-ops, gpu, "
            "counters, findings (default all; 'counters' alone is timing-free).",
            fast=True,
        ),
        Opt(
            "strict",
            ("--strict", "--no-strict"),
            kind="switch",
            help="An inconclusive gate fails (exit 1).",
            fast=True,
        ),
        _CONFIG,
        Opt(
            "junit",
            ("--junit",),
            help="Also write JUnit XML here (one test case per gated metric).",
            metavar="FILE",
            fast=True,
        ),
        Opt(
            "fmt",
            ("--format",),
            choices=("text", "md", "json"),
            help="text, md or json (default: from -o's extension, else text).",
            fast=True,
        ),
        Opt(
            "output",
            ("-o", "--output"),
            help="Write the report to FILE instead of stdout (the exit code is the same).",
            metavar="FILE",
            fast=True,
        ),
        DEBUG,
    ),
)

COMPARE = Command(
    "compare",
    "Runs side by side: every metric with its change and interval against the first, findings "
    "new / gone / changed, a row per rank, the kernels that changed most (traces).",
    (
        Arg(
            "paths",
            "A B [C]...",
            "Run directories, profile.json files or traces (all of one kind); A is the reference.",
        ),
    ),
    (
        Opt(
            "fmt",
            ("--format", "-f"),
            choices=_REPORT_FORMATS,
            help="text, md, json or html (default: from -o's extension, else text).",
        ),
        Opt(
            "output",
            ("-o", "--output"),
            help="Write to FILE instead of stdout.",
            metavar="FILE",
        ),
        Opt(
            "step_time_noise",
            ("--step-time-noise",),
            help="The least run-to-run drift of step time the intervals assume (default 1%, or "
            "the settings file's, as gpuopt check).",
        ),
        Opt(
            "share_noise",
            ("--share-noise",),
            help="The least run-to-run drift of a share the intervals assume (default 1pt).",
        ),
        Opt(
            "config",
            _CONFIG.flags,
            help=_CONFIG.help,
            metavar=_CONFIG.metavar,
        ),
        DEBUG,
    ),
)

OPTIMIZE = Command(
    "optimize",
    "Profile SCRIPT, plan fixes from its findings, apply them, run the same steps again, check "
    "the training is unchanged and measure each fix. The source changes go to stdout as one "
    "unified diff (the report to stderr and -o DIR).",
    (_SCRIPT,),
    (
        _MODULE,
        Opt(
            "out",
            ("-o", "--out"),
            help="Directory for optimize.json and the runs.",
            metavar="DIR",
        ),
        Opt(
            "steps",
            ("--steps",),
            type="int",
            default=OPTIMIZE_STEPS,
            min=2,
            help="Training steps of every run.",
        ),
        Opt(
            "warmup",
            ("--warmup",),
            type="int",
            default=2,
            min=0,
            help="Steps left out of the statistics.",
        ),
        Opt(
            "seed",
            ("--seed",),
            type="int",
            default=OPTIMIZE_SEED,
            min=0,
            max=SEED_MAX,
            help="Seed of every run (random, numpy, torch).",
        ),
        Opt(
            "fix",
            ("--fix",),
            kind="repeat",
            default=(),
            help="A fix to use (repeatable; default: every safe fix the findings call for): "
            "dataloader, pinned-copies, syncs, graph-breaks, framework-knobs, zero-grad, "
            "cudnn-benchmark, vectorize, padding, fused-ops, cuda-graphs (on a GPU); "
            "asked by name: aot; opt-in: amp, tf32, channels-last, compile, padding-batch, "
            "batch-size, accumulation (through a training framework's setting).",
        ),
        Opt(
            "amp_dtype",
            ("--amp-dtype",),
            default="auto",
            help="--fix amp's dtype: bf16, fp16 (with loss scaling), or auto (bf16 unless the "
            "GPU has no bf16).",
        ),
        Opt(
            "apply",
            ("--apply",),
            kind="flag",
            default=False,
            help="Keep fixes with a run-time form at run time (DIR/fixes.json).",
        ),
        Opt(
            "diff",
            ("--diff", "--no-diff"),
            kind="switch",
            default=True,
            help="Print the source changes as one unified diff (default).",
        ),
        Opt(
            "write",
            ("--write",),
            kind="flag",
            default=False,
            help="Edit the files in place (a backup of each is kept).",
        ),
        Opt(
            "baseline",
            ("--baseline",),
            help="An earlier gpuopt profile run to plan from.",
            metavar="DIR",
        ),
        Opt(
            "no_measure",
            ("--no-measure",),
            kind="flag",
            default=False,
            help="Only plan and print the diff: no candidate runs.",
        ),
        Opt(
            "quick",
            ("--quick",),
            kind="flag",
            default=False,
            help="No fix measured alone and the fewest timed runs (cheaper, less sure).",
        ),
        Opt(
            "time_budget",
            ("--time-budget",),
            type="float",
            min=0,
            metavar="SECONDS",
            help="Stop adding timed runs past this many seconds from the start (default 300; "
            "the fewest runs that give a verdict always run); the gain says how sure it is.",
        ),
        Opt(
            "quiet",
            ("--quiet",),
            kind="flag",
            default=False,
            help="No progress and no report on stderr.",
        ),
        Opt(
            "force",
            ("--force",),
            kind="flag",
            default=False,
            help="Replace an earlier optimize run in -o DIR.",
        ),
        Opt(
            "nproc_per_node",
            ("--nproc-per-node",),
            type="int",
            min=1,
            max=NPROC_MAX,
            help="Not yet: optimize runs one process.",
        ),
        Opt(
            "memory_for",
            ("--memory-for",),
            metavar="DEVICE|SIZE",
            help="Every run predicts the step's memory on that GPU (--fix batch-size needs it "
            "without a GPU).",
        ),
        DEBUG,
    ),
    interspersed=False,
)

# in the order of gpuopt --help
COMMANDS = {c.name: c for c in (PROFILE, RUN, REPORT, SCHEDULE, CHECK, COMPARE, OPTIMIZE)}
