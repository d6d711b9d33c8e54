"""`moekit plan`'s output as text: memory items per device, FLOPs and collectives, the forecast with its parts and
sources, weak scaling and the ranked layouts (pure: plain data in, a string out)."""

from __future__ import annotations

from typing import Any


def format_text(p: dict[str, Any]) -> str:
    """The plan as text: memory items per device, FLOPs and collectives, step-time model and scaling."""
    m, mem = p["model"], p["memory"]
    lines = [
        f"# moekit plan: {p['experiment']} on {p['hardware']}, {p['mesh']['text']}",
        f"model {m['name']}: {m['total_params'] / 1e9:.3g}B params ({m['active_params'] / 1e9:.3g}B active), "
        f"{m['tokens_per_device']:,.0f} tokens per device per step",
        "",
        "## memory per device (analytic estimate)",
    ]
    width = max(len(i["name"]) for i in mem["items"])
    for i in mem["items"]:
        where = i["place"] if i["place"] == "host" else i["phase"]
        lines.append(f"  {i['name']:<{width}}  {i['gib']:9.2f} GiB  {where:<6}  {i['how']}")
    ph = mem["phases_gib"]
    lines.append(
        f"  {'device peak':<{width}}  = step {ph['step']:.2f} GiB"
        f" + max(loss {ph['loss']:.2f}, layers {ph['layers']:.2f}) GiB"
    )
    limit = f" of {mem['device_limit_gib']:.1f} GiB usable" if mem["device_limit_gib"] else ""
    cal = mem["calibration"]
    lines.append(
        f"  {'device total':<{width}}  {mem['device_gib']:9.2f} GiB{limit}"
        f"  (x{cal['device_factor']:g}: {cal['status']})"
    )
    if mem["host_gib"] or mem["host_limit_gib"]:
        pool = f" of {mem['host_limit_gib']:.0f} GiB pinned pool" if mem["host_limit_gib"] else ""
        lines.append(f"  {'pinned host total':<{width}}  {mem['host_gib']:9.2f} GiB{pool}")
    lines += [f"  note: {n}" for n in mem["notes"]]
    lines += [f"WARNING: {w}" for w in mem["warnings"]]
    lines += ["", "## compute and communication per device per step"]
    lines.append(f"  training FLOPs  {p['flops']['train_tflop_per_device_step']:.4g} TFLOP (MaxText's count)")
    for c in p["communication"]:
        kind = "exposed" if c["exposed"] else "overlappable"
        lines.append(f"  {c['name']:<36} ICI {c['ici_gb']:9.3f} GB  DCN {c['dcn_gb']:8.3f} GB  {kind}; {c['how']}")
    if not p["communication"]:
        lines.append("  (no cross-device collectives on this mesh)")
    if "forecast" in p:
        lines += ["", *format_forecast(p["forecast"], p.get("scaling", []))]
    else:
        lines += [
            "",
            f"## forecast: none for hardware={p['hardware']} "
            f"(its row, conf/hardware/{p['hardware']}.yaml, has no peak, HBM bandwidth or links)",
        ]
    if "search" in p:
        lines += ["", *format_search(p["search"], p.get("search_ties"))]
    if "step" in p:
        s = p["step"]
        lines += [
            "",
            f"## no-overhead bound at {s['compute_tflops']:g} TFLOP/s while computing ({s['compute_source']})",
            f"  compute {s['compute_s']:.3f} s + exposed comm {s['exposed_comm_s']:.3f} s"
            f" + unhidden FSDP/DP {s['step_s'] - s['compute_s'] - s['exposed_comm_s']:.3f} s"
            f" (of {s['overlapped_comm_s']:.3f} s overlappable) = {s['step_s']:.3f} s/step,"
            f" {s['tflops_per_device']:.0f} TFLOP/s per device",
        ]
    for row in [] if "forecast" in p else p.get("scaling", []):
        lines.append(
            f"  {row['gpus']:>6} GPUs  {row['step_s']:.4f} s/step  weak-scaling efficiency vs one slice "
            f"{row['efficiency']:.2%}  ({row['mesh']})"
        )
    lines += [f"WARNING: {w}" for w in p.get("config_warnings", [])]
    lines += ["", f"provenance: {p['provenance']}"]
    return "\n".join(lines)


def format_forecast(f: dict[str, Any], scaling: list[dict[str, Any]]) -> list[str]:
    """The forecast section: step, TFLOP/s with its band (or "band not validated"), tokens/s, MFU, how the band was
    chosen and where the configuration sits among the measured points, each part with its source, scaling."""
    fits = f.get("fits", True)
    head = f"## forecast per device ({f['links']})"
    if not fits:
        head += f": {f['status']} (the memory estimate above says this configuration cannot run)"
    if f.get("band_validated", True):
        line = (
            f"  step {f['step_s']:.4g} s [{f['step_low_s']:.4g}-{f['step_high_s']:.4g}]   "
            f"{f['tflops_per_device']:.0f} TFLOP/s [{f['low']:.0f}-{f['high']:.0f}]   "
            f"{f['tokens_per_s_per_device']:,.0f} tokens/s [{f['tokens_per_s_per_device_low']:,.0f}-"
            f"{f['tokens_per_s_per_device_high']:,.0f}]   MFU {f['mfu']:.1%} [{f['mfu_low']:.1%}-{f['mfu_high']:.1%}] "
            f"of {f['mfu_peak_tflops']:g}"
        )
    else:  # no numbers that would read as a calibrated band
        line = (
            f"  step {f['step_s']:.4g} s   {f['tflops_per_device']:.0f} TFLOP/s   "
            f"{f['tokens_per_s_per_device']:,.0f} tokens/s   MFU {f['mfu']:.1%} of {f['mfu_peak_tflops']:g}   "
            "(band not validated)"
        )
    lines = [head, line + ("" if fits else "   hypothetical")]
    if "domain_text" in f:
        lines.append(f"  {f['band_text']}")
        lines.append(f"  domain: {f['domain_text']}")
        lines += [f"    {x}" for x in f["domain_differs"]]
    width = max(len(x["name"]) for x in f["parts"])
    for x in f["parts"]:
        lines.append(f"  {x['name']:<{width}}  {x['seconds']:8.4f} s  {x['how']}")
        lines.append(f"  {'':<{width}}  {'':8}    source: {x['source']}")
    if f["band_drivers"]:
        lines.append(
            "  parameters' band (each at the ends of its range, combined in quadrature); widest: "
            + ", ".join(f"{d['param']} {d['faster_s']:+.3g}/{d['slower_s']:+.3g} s" for d in f["band_drivers"][:4])
        )
    for row in scaling:
        lines.append(
            f"  {row['gpus']:>6} GPUs  {row['step_s']:.4g} s/step  {row['tflops_per_device']:.0f} TFLOP/s  "
            f"weak-scaling efficiency vs {row['against_gpus']} GPUs {row['efficiency']:.1%} "
            f"[{row['efficiency_low']:.1%}-{row['efficiency_high']:.1%}]  ({row['mesh']})"
        )
        if row["efficiency"] < 0.99995:
            lines.append(f"         where {1 - row['efficiency']:.1%} goes: {row['where_it_goes']}")
    lines.append(f"  provenance: {f['provenance']}")
    return lines


def format_search(rows: list[dict[str, Any]], ties: dict[str, Any] | None = None) -> list[str]:
    """The ranked layouts; with `ties` (search.mark_ties), those whose band overlaps the first's marked as ties."""
    lines = ["## layouts ranked by forecast tokens/s per device (those that do not fit left out)"]
    if rows and ties is None:
        lines.append("  the forecast's band is not validated here: the order is the model's, untested")
    elif rows and ties["tied"] > 1:
        lines.append(
            f"  ties: {ties['tied']} of {len(rows)} layouts lie within {ties['spread']:.1%} of the first, inside the "
            f"forecast's band (-{ties['low']:.1%}/+{ties['high']:.1%}): the forecast does not order them; measure them"
        )
    for i, r in enumerate(rows, 1):
        tie = "  tie" if ties is not None and ties["tied"] > 1 and r.get("tie_with_first") else ""
        lines.append(
            f"  {i:>2}. {r['mesh']:<48} batch {r['per_device_batch_size']:>4g}  {r['tokens_per_s_per_device']:>9,.0f} "
            f"tokens/s  {r['tflops_per_device']:.0f} TFLOP/s  {r['device_gib']:.0f} GiB  {r['overrides']}{tie}"
        )
    if not rows:
        lines.append("  none fits: fewer tokens per device, more remat or offload, or more GPUs")
    return lines
