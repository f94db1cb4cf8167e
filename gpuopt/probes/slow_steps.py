"""What a step far slower than the others did: the training thread's stack, sampled all run.

A step many times the median step, late in the run or recurring (a script that samples 500 tokens
from its model every 500 iterations, evaluates, saves a checkpoint), is no warm-up and no noise: it
is work the loop does now and then. The recorder's window sees a few early steps only, so this probe
looks at the training thread's Python stack for the whole run from the end of the first step (a
daemon thread; a look is a walk of the stack under the GIL, 10-30 microseconds, and each wake-up
costs the training thread the GIL handed over and back). Until a step of the run turns out slow, a
look comes every :data:`INTERVAL_S` (20 a second: on steps of a few milliseconds, one step in ten or
more holds a look, so the usual step pays nothing); from the first slow step on, the looks are timed
to catch the next ones. While the running step is not yet slow, the next look waits for the moment
it would be (:data:`SLOW_FACTOR` times the median after the last step ended, and
:data:`MIN_INTERVAL_S` more), at most :data:`INTERVAL_S`: a step that ends before then keeps no
samples, and the usual steps' frames are still seen; past it, the looks come every half median step,
from :data:`INTERVAL_S` down to :data:`MIN_INTERVAL_S` (a step four times a 4 ms median still gets a
look or more). The samples of a step are kept only when the step ends far slower than the median of
the steps before it (:data:`SLOW_FACTOR`, and :data:`MIN_INTERVAL_S` longer); the early steps'
samples wait until the end, when there is a median to judge them by. The samples of the steps near
the median (:data:`USUAL_FACTOR`) are the loop's usual work; the slow steps' own work is what the
usual steps' samples show far less often than the slow steps' (:meth:`SlowStepSampler._new_work`). A
sample of a slow step is named by the user's line that called the outermost function of that work
whose name says what it does (``generate``/``sample``: sampling; ``eval``/``valid``/``test``:
evaluation; torch's ``serialization``, ``save``: checkpointing), else by the outermost user line of
that work (the line in the loop that called it); a step is named by its samples of its own work
where it has any (on a busy machine the usual work of a slow step is slowed too, and sampled more
than the work that made it slow). Nothing here judges what is an outlier of the run:
``findings/rules/slow_steps.py`` does, from the step times.
"""

from __future__ import annotations

import bisect
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from types import CodeType
from typing import Any

from gpuopt.debug import logger
from gpuopt.model.records import SlowStep
from gpuopt.probes.own_cost import ThreadTime
from gpuopt.probes.protocol import RunContext

log = logger(__name__)

INTERVAL_S = 0.05  # between looks at the stack: an 8 s step gets ~160 samples, a 0.5 s one ~10
# ... or half the median step where that is shorter, down to this: 100 looks a second, 30 us each
# on this loaded 2-core machine (0.3% of a core)
MIN_INTERVAL_S = 0.01
MIN_WAIT_S = 1e-3  # the shortest wait for a step to turn slow (no wake-ups back to back)
# A step this many times the median of the recent ones, and MIN_INTERVAL_S longer, keeps its
# samples (the rule flags one of 4x the run's median: kept looser, a busy machine's slower steps
# still named)
SLOW_FACTOR = 2.0
USUAL_FACTOR = 1.5  # a step at most this many times the median shows the loop's usual frames
RECENT = 101  # steps the running median is taken over
EARLY = 8  # the first steps, judged at the end by the median of the run
MAX_KEPT = 256  # slow steps whose samples are kept (the longest; the rest by their period)
MAX_DEPTH = 64  # frames kept per sample, innermost first
MAX_USUAL = 100_000  # frames remembered as the usual steps' ones
# The slow steps' own work: a line the usual steps' samples never show where chance (under
# LINE_ALPHA) says they would have at half its rate in the slow steps' samples (a busy machine
# slows the usual work of a slow step too: there a sampling step's own work was 14% of them) ...
LINE_RATE, LINE_ALPHA = 2.0, 0.01
# ... or a function named for what it does (generate, evaluate, save), on less evidence (or none:
# never in the usual steps' samples)
KIND_RATE, KIND_ALPHA = 1.5, 0.05

Stack = tuple[tuple[int, int], ...]  # (id(code), lasti), innermost first

_KINDS = (
    ("checkpointing", ("serialization.py", "save", "checkpoint")),
    ("sampling", ("generate", "sample", "decode")),
    ("evaluation", ("eval", "valid", "test", "estimate_loss", "accuracy")),
)


class SlowStepSampler:
    """The probe (see the module doc)."""

    name = "slow-steps"

    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_s = interval_s  # between looks now: shorter where the steps are short
        self.max_interval_s = interval_s
        self.codes: dict[int, CodeType] = {}
        self.usual: Counter[tuple[int, int]] = Counter()  # frame -> usual samples showing it
        self.usual_samples = 0  # the usual steps' samples
        self.kept: dict[int, tuple[float, Counter[Stack]]] = {}  # index -> (seconds, stacks)
        self.errors: list[str] = []
        self._current: list[Stack] = []
        self._recent: deque[float] = deque(maxlen=RECENT)
        # the same times in order: each step's median without sorting the recent ones again
        # (a step judged on the sampler's thread, up to 100 a second on short steps)
        self._recent_sorted: list[float] = []
        self._early: list[tuple[int, float, list[Stack]]] = []
        self._stacks: dict[Stack, Stack] = {}
        self._last_t: float | None = None
        self._median: float | None = None  # of the recent steps, once there are enough
        # a slow step was seen: looks timed to catch the next ones (until then every INTERVAL_S)
        self._eager = False
        self._clock: Callable[[], float] = time.perf_counter  # the step clock's
        self._ends: deque[tuple[int, float, list[Stack]]] = deque()  # steps ended, not yet judged
        self._stop = threading.Event()
        # set when the first step has ended: no look before (step 0 is never judged, and the
        # script's imports and setup before it would only cost the training thread the GIL)
        self._first = threading.Event()
        self._waiting_first = True
        self._thread: threading.Thread | None = None
        self._tid = 0
        self._roots: list[Any] = []
        self._final: list[SlowStep] | None = None
        self.cpu_time = ThreadTime()  # the sampling thread's own CPU seconds

    # -- Probe interface -------------------------------------------------------------------
    def start(self, ctx: RunContext) -> None:
        self._roots = list(ctx.user_roots)
        self._clock = ctx.clock or time.perf_counter
        self._last_t = self._clock()  # the step clock's times
        self._tid = threading.get_ident()
        self._thread = threading.Thread(target=self._run, name="gpuopt-slow-steps", daemon=True)
        self._thread.start()

    def on_step(self, index: int, t: float) -> None:
        """The same few calls every step (a slow step costs the training thread nothing more):
        the step is judged on the sampler's thread, at its next look."""
        samples = self._current
        self._current = []
        self._ends.append((index, t, samples))
        if self._waiting_first:
            self._waiting_first = False
            self._first.set()

    def _drain(self) -> None:
        ends = self._ends
        while ends:
            self._ended(*ends.popleft())

    def _ended(self, index: int, t: float, samples: list[Stack]) -> None:
        last, self._last_t = self._last_t, t
        if last is None:
            return
        seconds = t - last
        if index == 0:  # the first step: imports, first calls, allocations; not judged
            return
        if index < EARLY:
            self._early.append((index, seconds, samples))
        else:
            self._judge(index, seconds, samples, _median(self._recent_sorted))
        recent, ordered = self._recent, self._recent_sorted
        if len(recent) == recent.maxlen:
            del ordered[bisect.bisect_left(ordered, recent[0])]
        recent.append(seconds)
        bisect.insort(ordered, seconds)

    def stop(self) -> None:
        self._stop.set()
        self._first.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        self._thread = None
        self._drain()
        median = _median(sorted([s for _, s, _ in self._early] + list(self._recent)))
        for index, seconds, samples in self._early:
            self._judge(index, seconds, samples, median)
        self._early.clear()
        try:
            self._final = self._named()
        except Exception as exc:  # naming reads the user's files: never lose the run for it
            log.debug("slow steps: not named", exc_info=True)
            self.errors.append(f"slow steps not named: {type(exc).__name__}: {exc}")
            self._final = []

    def result(self) -> list[SlowStep]:
        return list(self._final or [])

    # -- sampling ----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._first.wait()
            while not self._stop.wait(self._wait()):
                self._drain()
                self.look()
                self.cpu_time.read()
        except Exception as exc:  # never disturb the run: stop sampling and say why
            log.debug("slow steps: the sampler gave up", exc_info=True)
            self.errors.append(f"slow-step sampler stopped: {type(exc).__name__}: {exc}")

    def _wait(self) -> float:
        """Seconds until the next look (see the module doc): until the running step would be
        slow, or the usual pace once it is."""
        self._drain()
        median, last = self._median, self._last_t
        if median is None or last is None or not self._eager:
            return self.max_interval_s
        left = last + max(SLOW_FACTOR * median, median + MIN_INTERVAL_S) - self._clock()
        if left <= 0:
            return self.interval_s
        return min(max(left, MIN_WAIT_S), self.max_interval_s)

    def look(self) -> None:
        """One sample of the training thread's stack, into the running step's."""
        frame = sys._current_frames().get(self._tid)
        stack: list[tuple[int, int]] = []
        codes = self.codes
        f = frame
        while f is not None and len(stack) < MAX_DEPTH:
            code = f.f_code
            stack.append((id(code), f.f_lasti))
            if id(code) not in codes:
                codes[id(code)] = code
            f = f.f_back
        if stack:
            key = tuple(stack)
            self._current.append(self._stacks.setdefault(key, key))

    # -- judging -----------------------------------------------------------------------------
    def _judge(
        self, index: int, seconds: float, samples: list[Stack], median: float | None
    ) -> None:
        """Keep a slow step's samples; note a usual one's frames; neither for one between
        (``median``: of the steps it is judged by; None below 3 of them)."""
        if median is None:
            return
        self._median = median
        self.interval_s = min(self.max_interval_s, max(MIN_INTERVAL_S, median / 2))
        if seconds >= SLOW_FACTOR * median and seconds - median >= MIN_INTERVAL_S:
            self._eager = True
            self._keep(index, seconds, samples)
        elif seconds <= USUAL_FACTOR * median:
            self._usual(samples)

    def _keep(self, index: int, seconds: float, samples: list[Stack]) -> None:
        if not samples:
            return
        if len(self.kept) >= MAX_KEPT:
            shortest = min(self.kept, key=lambda i: self.kept[i][0])
            if self.kept[shortest][0] >= seconds:
                return
            del self.kept[shortest]
        self.kept[index] = (seconds, Counter(samples))

    def _usual(self, samples: list[Stack]) -> None:
        if len(self.usual) >= MAX_USUAL:
            return
        self.usual_samples += len(samples)
        for stack in samples:
            self.usual.update(stack)

    # -- naming ------------------------------------------------------------------------------
    def _named(self) -> list[SlowStep]:
        if not self.kept:
            return []
        from gpuopt.sites import GPUOPT_DIR, USER, SiteResolver

        resolver = SiteResolver(self._roots)
        # the code objects of the kept steps' samples only (every step's are in self.codes)
        seen = {fr[0] for _, stacks in self.kept.values() for stack in stacks for fr in stack}
        codes = self.codes
        lines: dict[tuple[int, int], tuple[int, int]] = {}

        def line(fr: tuple[int, int]) -> tuple[int, int]:
            got = lines.get(fr)
            if got is None:
                got = lines[fr] = (fr[0], resolver.position(codes[fr[0]], fr[1])[0])
            return got

        is_user = {cid: resolver.classify(codes[cid]) == USER for cid in seen}
        own = {cid for cid in seen if codes[cid].co_filename.startswith(GPUOPT_DIR)}
        new_lines, new_funcs = self._new_work(line)
        new = (new_lines, new_funcs - own)  # gpuopt's own functions say nothing of the work
        out: list[SlowStep] = []
        for index in sorted(self.kept):
            _, stacks = self.kept[index]
            sites: Counter[tuple[int, int]] = Counter()
            own_sites: Counter[tuple[int, int]] = Counter()  # of the samples of new work
            calls: Counter[str] = Counter()
            kinds: Counter[str] = Counter()
            usual = 0
            for stack, n in stacks.items():
                site, kind, shows_new = self._site_of(stack, is_user, new, line)
                if site is not None:
                    sites[site] += n
                    if shows_new:
                        own_sites[site] += n
                if kind is not None:
                    kinds[kind] += n
                usual += 0 if shows_new else n
                inner = next((fr for fr in stack if fr[0] not in own), None)
                if inner is not None:
                    calls[self._where(resolver, inner)] += n
            step = self._step(resolver, index, stacks, own_sites or sites, calls, kinds, usual)
            out.append(step)
        return out

    def _new_work(
        self, line: Callable[[tuple[int, int]], tuple[int, int]]
    ) -> tuple[set[tuple[int, int]], set[int]]:
        """The lines, and the functions, that are the slow steps' own work: the lines the usual
        steps' samples never show where chance says they would have (:func:`_rare`, at a
        fraction of their rate in the slow steps' samples), and the functions they never show
        or show far less often than chance allows. Lines, not instructions (a look that lands on
        a rarely sampled call of a usual line is the usual work); never, for a line (a busy
        machine slows some of the usual work far more than the rest: a conv net's backward,
        its threads waiting on a core taken away); a rate, for a function named for what it
        does (a sampling step a busy machine made look usual once does not make sampling the
        usual work); and chance (a short run's few usual samples that missed its backward line
        say nothing; a function named ``generate`` they never show is work of its own however
        few they are)."""
        usual_lines = {line(fr) for fr in self.usual}
        usual_funcs: Counter[int] = Counter()
        for fr, n in self.usual.items():
            usual_funcs[fr[0]] += n
        slow_lines: Counter[tuple[int, int]] = Counter()
        slow_funcs: Counter[int] = Counter()
        kept = 0
        for _, stacks in self.kept.values():
            for stack, n in stacks.items():
                kept += n
                slow_lines.update(dict.fromkeys({line(fr) for fr in stack}, n))
                slow_funcs.update(dict.fromkeys({fr[0] for fr in stack}, n))
        usual = self.usual_samples
        lines = {
            ln
            for ln, n in slow_lines.items()
            if ln not in usual_lines and _rare(0, usual, n / kept, LINE_RATE, LINE_ALPHA)
        }
        funcs = {
            cid
            for cid, n in slow_funcs.items()
            if not usual_funcs[cid]
            or _rare(usual_funcs[cid], usual, n / kept, KIND_RATE, KIND_ALPHA)
        }
        return lines, funcs

    def _site_of(
        self,
        stack: Stack,
        is_user: dict[int, bool],
        new: tuple[set[tuple[int, int]], set[int]],
        line: Callable[[tuple[int, int]], tuple[int, int]],
    ) -> tuple[tuple[int, int] | None, str | None, bool]:
        """The user's line a sample of a slow step is under, and what it is doing: the line
        that called the outermost function of the slow steps' own work whose name says what it
        does (``generate``, ``evaluate``, torch's ``save``); else the outermost user line of
        their own work; else the innermost user frame (``new``: :meth:`_new_work`'s). The
        last: whether the sample showed the slow steps' own work (one of the first two)."""
        new_lines, new_funcs = new
        users: list[tuple[int, int]] = []
        for fr in stack[::-1]:
            if fr[0] in new_funcs:
                kind = _kind(self.codes[fr[0]])
                if kind is not None:
                    return (users[-1] if users else None), kind, True
            if is_user.get(fr[0]):
                users.append(fr)
        own = [fr for fr in users if line(fr) in new_lines]
        if own:
            return own[0], None, True
        return (users[-1] if users else None), None, False

    def _step(
        self,
        resolver: Any,
        index: int,
        stacks: Counter[Stack],
        sites: Counter[tuple[int, int]],
        calls: Counter[str],
        kinds: Counter[str],
        usual: int,
    ) -> SlowStep:
        """A kept step, named by ``sites``; its kind, that of most of its samples of new work
        (``usual``: its samples of the usual work)."""
        total = sum(stacks.values())
        step = SlowStep(
            index=index,
            samples=total,
            calls=[c for c, _ in calls.most_common(3)],
            usual_samples=usual,
        )
        if sites:
            (cid, lasti), n = sites.most_common(1)[0]
            code = self.codes[cid]
            line = resolver.position(code, lasti)[0]
            step.site = f"{resolver.relpath(code)}:{line}"
            step.code = _source_line(resolver.abspath(code.co_filename), line)
            step.at_site = n
        if kinds:
            kind, n = kinds.most_common(1)[0]
            if 2 * n >= total - usual:
                step.kind = kind
        return step

    def _where(self, resolver: Any, frame: tuple[int, int]) -> str:
        """The innermost frame, ``file:line (function)``, a library's file from its package."""
        code = self.codes[frame[0]]
        path = resolver.relpath(code)
        for marker in ("/site-packages/", "/dist-packages/"):
            if marker in path:
                path = path.split(marker, 1)[1]
        return f"{path}:{resolver.position(code, frame[1])[0]} ({code.co_name})"


def _median(ordered: list[float]) -> float | None:
    """The median of times in ascending order (as ``statistics.median``); None below 3."""
    n = len(ordered)
    if n < 3:
        return None
    mid = n // 2
    return ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _rare(seen: int, samples: int, rate: float, factor: float, alpha: float) -> bool:
    """Whether ``seen`` of ``samples`` is less than chance allows (``alpha``) at ``rate`` divided
    by ``factor``: the binomial distribution's probability of ``seen`` or fewer."""
    from gpuopt.stats.binomial import lower_tail  # at the run's end only, not its start

    p = rate / factor
    if samples == 0 or seen >= samples * p:
        return False
    return p >= 1.0 or lower_tail(seen, samples, p) < alpha


def _kind(code: CodeType) -> str | None:
    """What a function does, from its name or its file's (see the module doc)."""
    file, func = code.co_filename.rsplit("/", 1)[-1], code.co_name.lower()
    for kind, words in _KINDS:
        if any(w in func or w == file for w in words):
            return kind
    return None


def _source_line(path: str, line: int) -> str | None:
    import linecache

    text = linecache.getline(path, line).strip()
    if not text:
        return None
    return text if len(text) <= 120 else text[:117] + "..."
