"""``gpuopt compare A B [C ...]``: runs side by side, each metric with its change and interval
against the first; the run-to-run floors of the intervals as ``gpuopt check`` sets them."""

from __future__ import annotations

from pathlib import Path

from gpuopt.errors import GpuoptError
from gpuopt.gate.check import Thresholds
from gpuopt.gate.runs import load_side, same_kind
from gpuopt.paths import check_output


def compare_command(
    paths: list[Path],
    fmt: str | None,
    output: Path | None,
    noise: dict[str, str | None] | None = None,
    config: str | None = None,
) -> None:
    """``gpuopt compare A B [C ...]``: bad input raises GpuoptError (exit 2). ``noise``: the
    ``step-time-noise`` / ``share-noise`` flags (text or None); they, else the settings file
    ``check`` reads (``config``, else the nearest pyproject.toml), set the run-to-run floor of
    the intervals, so that compare and check draw the same intervals."""
    from gpuopt.commands.report import write_output as write_report
    from gpuopt.gate.compare import compare
    from gpuopt.gate.compare_render import FORMATS as COMPARE_FORMATS
    from gpuopt.gate.compare_render import render
    from gpuopt.gate.config import find_config
    from gpuopt.report import format_for_path

    if len(paths) < 2:
        raise GpuoptError("gpuopt compare needs two runs or more: gpuopt compare A B")
    name = fmt or format_for_path(output) or "text"
    if name not in COMPARE_FORMATS:
        raise GpuoptError(f"gpuopt compare prints {', '.join(COMPARE_FORMATS)}, not {name!r}")
    if output is not None:
        config_file = Path(config) if config else find_config(Path.cwd())
        check_output(output, [*paths, *filter(None, [config_file])])
    th, floors = _compare_floors(noise or {}, config)
    runs = load_side(paths)
    same_kind(runs[:1], runs[1:])
    comparison = compare([str(r.path) for r in runs], [r.profile for r in runs], th)
    if floors:
        comparison.notes.append(floors)
    text = render(comparison, name)
    write_report(text, output, failure="cannot write")


def _compare_floors(noise: dict[str, str | None], config: str | None) -> tuple[Thresholds, str]:
    """The thresholds whose noise floors compare uses, and a note saying which floors the
    intervals assume and where they came from (one run against another: the step-time floor
    assumed for one run a side, unless given)."""
    from gpuopt.gate.check import DATA_WAIT_DRIFT, share_floor, step_floor
    from gpuopt.gate.config import load_settings, resolve

    settings = load_settings(Path(config) if config else None, Path.cwd())
    flags = {k: noise.get(k) for k in ("step-time-noise", "share-noise")}
    th, _ = resolve(flags, [], None, settings)
    default = Thresholds()
    step, share = step_floor(th, 2), share_floor(th, 2, DATA_WAIT_DRIFT)
    if not th.step_time_noise_given and th.share_noise == default.share_noise:
        return th, (
            f"intervals assume a run-to-run drift of {step:.1%} in step time and "
            f"{share * 100:.1f}pt in the data-wait share, the drift assumed for one run against "
            "another (it cannot measure yours; docs/check.md#noise): give your machine's with "
            "--step-time-noise"
        )
    sources = []
    if any(v is not None for v in flags.values()):
        sources.append("the command line")
    if any(v is None and k in settings.values for k, v in flags.items()):
        sources.append(settings.source or "the settings file")
    where = " and ".join(sources)
    return th, (
        f"intervals assume a run-to-run drift of at least {step:.1%} in step time "
        f"and {share * 100:.1f}pt in the data-wait share (from {where}; defaults "
        f"{step_floor(default, 2):.0%} and {share_floor(default, 2, DATA_WAIT_DRIFT) * 100:.0f}pt)"
    )
