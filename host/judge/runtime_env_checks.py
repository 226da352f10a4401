"""Gate checks on runtime environments measured side by side (``[runtime_envs]``,
docs/gating.md).

Every limit is judged per environment after the baseline (the first the run named),
on the agent's ratio of the two measured in the same run: ``max_p50_ratio`` and
``max_p99_ratio`` on the point ratio (its 95 % interval in the message),
``max_cold_load_ratio`` on the median cold-load totals, ``max_flips_between`` on the
golden cases whose decision differs between the two, ``max_drift_abs_between`` and
``min_psnr_db_between`` on the outputs of the two over the golden set. The latency
ratios of a comparison whose segments waited for a CPU are not decisive: those limits
fail as not measured, naming the interference. ``required`` names environments
the report must have measured. A limit on a report without environments fails as not
measured, naming the flag that measures it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .check_kit import INTEGER, NUMBER, TEXT_LIST, Check, GateSection, limit_check, not_measured
from .runtime_envs import env_rows, env_section, interference_text, ratio_text

if TYPE_CHECKING:
    from .policy import Policy

NAME = "runtime_envs"
_LIMITS = {
    "max_p50_ratio": ("p50_ratio", "p50_ratio_ci", "p50 / baseline p50"),
    "max_p99_ratio": ("p99_ratio", "p99_ratio_ci", "p99 / baseline p99"),
    "max_cold_load_ratio": ("cold_load_ratio", None, "cold load / baseline cold load (median)"),
    "max_flips_between": ("flips_between", None, "decision flips against the baseline"),
    "max_drift_abs_between": (
        "drift_between_max_abs",
        None,
        "max abs output difference from the baseline",
    ),
    "min_psnr_db_between": ("drift_between_psnr_db", None, "PSNR against the baseline's outputs"),
}
# Latency limits a comparison interfered with cannot decide (not its outputs).
_TIMED = ("max_p50_ratio", "max_p99_ratio")


def _flag(names: list[str]) -> str:
    names = names or ["NAME", "default"]
    return "qualify with " + " ".join(f"--runtime-env {n}" for n in names)


def runtime_env_checks(results: dict, policy: Policy) -> list[Check]:
    """One check per ``[runtime_envs]`` limit and environment after the baseline."""
    limits = dict(policy.runtime_envs)
    required = list(limits.pop("required", []) or [])
    if not limits and not required:
        return []
    if env_section(results) is None:
        how = _flag(required)
        return [
            not_measured(
                NAME,
                f"{NAME}.{key}",
                str(value),
                f"{NAME}.{key}: not measured: the report has no runtime environments ({how})",
            )
            for key, value in [*limits.items(), *([("required", required)] if required else [])]
        ]
    rows = env_rows(results)
    by_name = {r["name"]: r for r in rows}
    checks = []
    for name in required:
        row = by_name.get(name)
        ok = row is not None and row["status"] == "ok"
        measured = "absent" if row is None else row["status"]
        message = (
            f"{name}: measured"
            if ok
            else f"{name}: {'not measured (' + _flag([name]) + ')' if row is None else row.get('reason') or row['status']}"
        )
        checks.append(Check(f"{NAME}.required[{name}]", NAME, ok, "measured", measured, message))
    baseline = next((r["name"] for r in rows if r["baseline"]), rows[0]["name"])
    for row in rows:
        if row["baseline"]:
            continue
        name = row["name"]
        for key, limit in limits.items():
            figure, ci_key, what = _LIMITS[key]
            label = f"{name}: {what} ({baseline})"
            if row["status"] != "ok":
                checks.append(
                    not_measured(
                        NAME,
                        f"{NAME}.{key}[{name}]",
                        f"≤ {limit:g}",
                        f"{label}: not measured: {row.get('reason') or row['status']}",
                    )
                )
                continue
            if key in _TIMED and not row.get("decisive", True):
                checks.append(
                    not_measured(
                        NAME,
                        f"{NAME}.{key}[{name}]",
                        f"≤ {limit:g}",
                        f"{label}: {interference_text(row)}",
                    )
                )
                continue
            if key == "min_psnr_db_between" and row["drift_between_max_abs"] == 0:
                checks.append(
                    Check(
                        f"{NAME}.{key}[{name}]", NAME, True, f"≥ {limit:g}", "identical",
                        f"{label}: identical outputs",
                    )
                )  # fmt: skip
                continue
            detail = ""
            if ci_key and row.get(ci_key):
                detail = f"95 % interval {ratio_text(row[figure], row[ci_key]).split(' ', 1)[1]}"
            if key == "max_flips_between" and row["flipped_cases"]:
                detail = "cases " + ", ".join(row["flipped_cases"][:5])
            missing = "not measured"
            if key == "max_p99_ratio":
                missing = "not measured: p99 needs 368 samples in each environment (a longer plan)"
            if key == "max_flips_between" and row[figure] is None:
                missing = "not measured: the golden set has no decision rule"
            if key in ("max_drift_abs_between", "min_psnr_db_between"):
                missing = "not measured: a golden set gives the outputs compared"
            checks.append(
                limit_check(
                    NAME,
                    f"{NAME}.{key}[{name}]",
                    label,
                    row[figure],
                    limit,
                    "min" if key.startswith("min_") else "max",
                    detail=detail,
                    missing=missing,
                )
            )
    return checks


SECTION = GateSection(
    NAME,
    keys={
        "required": TEXT_LIST,
        "max_p50_ratio": NUMBER,
        "max_p99_ratio": NUMBER,
        "max_cold_load_ratio": NUMBER,
        "max_flips_between": INTEGER,
        "max_drift_abs_between": NUMBER,
        "min_psnr_db_between": NUMBER,
    },
    checks=runtime_env_checks,
)
