"""Reading a report's kernel paths and localisations (``results.kernel_paths``,
``results.divergence``; docs/divergence.md): the rows and lines the terminal, the page and
``compare`` show. Pure."""

from __future__ import annotations


def placement_text(placement: dict | None) -> str:
    """Where a path's operators ran, in a few words."""
    if not placement:
        return "CPU"
    if "delegate" in placement:
        if placement.get("delegate") is None:
            return "no delegate"
        return (
            f"{placement['delegate']}: {placement['delegated_nodes']} of {placement['nodes']} nodes"
        )
    text = f"{placement.get('off_cpu_nodes', 0)} of {placement.get('nodes', 0)} nodes off the CPU"
    fallback = placement.get("cpu_fallback") or {}
    fell = fallback.get("cpu_nodes")
    if fell:
        text += f", {len(fell)} fell back to the CPU"
    return text


def divergence_text(entry: dict) -> str | None:
    """A path's (or the run's) localisation in one line, None when there was none."""
    div = entry.get("divergence") if "localization" not in entry else entry
    if not div:
        return None
    if "message" in div:
        return div["message"]
    return div.get("skipped") or div.get("failed")


def path_rows(results: dict) -> list[dict]:
    """One row per kernel path: ``name, reference, status, p50_ms, max_abs, psnr_db, flips,
    placement, divergence`` (absent and failed paths carry their reason as ``divergence``)."""
    section = results.get("kernel_paths") or {}
    rows = []
    for entry in section.get("paths", []):
        row = {
            "name": entry["name"]
            + (f" [{entry['runtime_env']}]" if entry.get("runtime_env") else ""),
            "reference": bool(entry.get("reference")),
            "status": entry["status"],
            "p50_ms": None,
            "max_abs": None,
            "psnr_db": None,
            "flips": None,
            "drift_passed": None,
            "placement": "",
            "divergence": entry.get("reason"),
        }
        if entry["status"] == "ok":
            drift = entry["drift"]
            row.update(
                {
                    "p50_ms": (entry.get("latency") or {}).get("p50_ms"),
                    "max_abs": drift.get("max_abs"),
                    "psnr_db": drift.get("psnr_db"),
                    "flips": drift.get("flips"),
                    "drift_passed": drift.get("passed"),
                    "placement": placement_text(entry.get("placement")),
                    "divergence": divergence_text(entry),
                }
            )
        rows.append(row)
    return rows


def error_curves(results: dict) -> list[tuple[str, list[dict], int | None]]:
    """Each localisation's per-node error curve: ``(label, curve, index of the first
    divergent node or None)``; the run's own first, then each path's."""
    out = []
    own = results.get("divergence")
    if own and "localization" in own:
        loc = own["localization"]
        out.append((f"model against {own['against']}", loc["curve"], loc.get("index")))
    for entry in (results.get("kernel_paths") or {}).get("paths", []):
        div = entry.get("divergence") or {}
        if "localization" in div:
            loc = div["localization"]
            out.append(
                (f"{entry['name']} against {div['against']}", loc["curve"], loc.get("index"))
            )
    return out


def first_divergent_nodes(results: dict) -> dict[str, str]:
    """``{path or "model": node (op type)}`` for every localisation that named a node."""
    out = {}
    own = (results.get("divergence") or {}).get("localization") or {}
    if own.get("found"):
        out["model"] = f"{own['node']} ({own['op_type']})"
    for entry in (results.get("kernel_paths") or {}).get("paths", []):
        loc = (entry.get("divergence") or {}).get("localization") or {}
        if loc.get("found"):
            out[entry["name"]] = f"{loc['node']} ({loc['op_type']})"
    return out
