"""One Profile for a multi-process run: rank 0's document, plus a row per rank.

Time in collectives (``ranks[].collective_s_per_step``) is not measured by a run's probes yet:
it stays null rather than being guessed.
"""

from __future__ import annotations

import msgspec

from gpuopt.model.document import empty_profile
from gpuopt.model.profile import Profile, RankEntry, RankSpread, Status


def merged_status(statuses: list[Status], exit_code: int) -> Status:
    """The job's status: interrupted if any rank was (or the launcher was), else error if any
    rank failed or the launcher exited non-zero, else ok."""
    if "interrupted" in statuses or exit_code == 130:
        return "interrupted"
    if exit_code != 0 or "error" in statuses:
        return "error"
    return "ok"


def merge_ranks(
    ranks: list[tuple[str, Profile]], exit_code: int, script: str, argv: list[str]
) -> Profile:
    """``ranks``: each rank's run directory (relative to the job's) and Profile, rank order."""
    if ranks:
        doc = msgspec.structs.replace(ranks[0][1])
    else:
        doc = empty_profile(script, argv)
        doc.warnings = ["no rank wrote a profile: the launcher failed before any rank started"]
    doc.exit_code = exit_code
    doc.status = merged_status([p.status for _, p in ranks], exit_code)
    doc.rank = None
    doc.ranks = [
        RankEntry(
            rank=p.rank if isinstance(p.rank, int) else i,
            dir=rank_dir,
            status=p.status,
            steps=p.steps.count,
            step_time_median_s=p.steps.time_s.median,
            breakdown=p.breakdown,
            collective_s_per_step=None,
        )
        for i, (rank_dir, p) in enumerate(ranks)
    ]
    medians = [
        (r.step_time_median_s, r.rank)
        for r in doc.ranks
        if isinstance(r.step_time_median_s, float) and r.step_time_median_s
    ]
    if len(medians) > 1:
        slow, fast = max(medians), min(medians)
        doc.rank_spread = RankSpread(
            slowest_rank=slow[1], fastest_rank=fast[1], ratio=slow[0] / fast[0]
        )
    return doc
