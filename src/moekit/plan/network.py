"""Per-device communication volume of one step and an analytic step-time / weak-scaling model (pure).

Collectives per device and step:
- EP dispatch + combine (routed tokens to the experts' devices and back), once per MoE layer in the
  forward pass, once in the backward pass, and once more when the backward recomputes the dispatch
  (the expert-sorted input is not saved). Ragged all-to-all sends tokens x top_k x emb x (EP-1)/EP;
  MaxText's ring of experts all-gathers tokens x emb x (EP-1) and reduce-scatters the same back.
- FSDP: every layer's weights all-gathered in the forward and again in the backward, gradients
  reduce-scattered once; each moves gathered x (n-1)/n per device, split between the NVLink domain and
  the data-center network hierarchically. Routed experts gather over fsdp only (EP shards them); other
  weights over fsdp x expert.
- Data parallelism: gradient all-reduce, 2 x shard x (d-1)/d.

Step time = compute + EP (exposed: the dispatch sits between router and expert GEMMs) + the FSDP/DP
traffic at the edges of the layer loop (first all-gather, last reduce-scatter) + whatever else of it the
compute cannot hide. docs/plan.md states what is calibrated and what is extrapolated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from moekit.config.schema import Hardware
from moekit.plan.memory import tensor_places
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims, dtype_bytes


@dataclass(frozen=True, slots=True)
class Links:
    """The hardware's link rates, bytes/s per GPU per direction, inside and across NVLink domains."""

    scale_up: float
    """Bytes/s per GPU per direction inside the NVLink domain (ICI traffic that stays in it)."""
    scale_out: float
    """Bytes/s per GPU per direction across domains (the DCN axes, and ICI traffic that leaves the domain)."""

    @classmethod
    def from_table(cls, classes: Mapping[str, Mapping[str, Any]], hardware: Hardware) -> Links | None:
        """The rates of the hardware row's link classes (`classes`: link class -> its entry in data/links.yaml);
        None without links (CPU)."""
        if hardware.links is None:
            return None
        rate = {name: float(e["gb_per_s"]) * 1e9 for name, e in classes.items()}
        return cls(rate[hardware.links.scale_up], rate[hardware.links.scale_out])


@dataclass(frozen=True, slots=True)
class Traffic:
    """One collective's bytes per device per step, split by link, and whether compute can hide it."""

    name: str
    ici_bytes: float
    """Over NVLink, inside one NVLink domain."""
    dcn_bytes: float
    """Over the network between NVLink domains: the DCN axes and ICI axes that span more than one domain."""
    exposed: bool
    """On the critical path (True) or overlappable with compute by XLA's latency-hiding scheduler."""
    how: str

    def seconds(self, links: Links) -> float:
        """Time to move the bytes at these link rates, s (NVLink and network in series)."""
        return self.ici_bytes / links.scale_up + self.dcn_bytes / links.scale_out


def _hierarchical(gathered: float, ici: int, dcn: int, off_domain: float = 0.0) -> tuple[float, float]:
    """Bytes one device receives over NVLink and over the network to gather `gathered` bytes sharded over
    ici x dcn (DCN stage first); `off_domain` of the ICI stage's peers sit in other NVLink domains (network)."""
    dcn_part = gathered / ici * (dcn - 1) / dcn
    ici_part = gathered * (ici - 1) / ici
    return ici_part * (1 - off_domain), dcn_part + ici_part * off_domain


def traffic(dims: Dims, values: Mapping[str, Any], mesh: Mesh) -> list[Traffic]:
    """The collectives of one step per device: EP dispatch and combine, FSDP gathers and reduce-scatter, DP gradient
    all-reduce, each present only when its axes are larger than 1."""
    a = dtype_bytes(values.get("dtype", "bfloat16"))
    w = dtype_bytes(values.get("weight_dtype", "float32"))
    out: list[Traffic] = []
    ep_ici, ep_dcn = mesh.ici["expert"], mesh.dcn["expert"]
    ep = ep_ici * ep_dcn
    t = dims.tokens

    if ep > 1 and dims.moe_layers:
        saved, offloaded = tensor_places(values)
        recompute = "moe_x_sorted" not in saved | offloaded
        passes = 3 if recompute else 2
        if values.get("use_ring_of_experts"):
            per = 2 * t * dims.emb * a * (ep - 1)
            kind = f"ring of experts: all-gather + reduce-scatter of tokens x emb x (EP-1), {passes} passes"
        else:
            per = 2 * t * dims.top_k * dims.emb * a * (ep - 1) / ep
            kind = f"ragged all-to-all: 2 x tokens x top_k x emb x (EP-1)/EP, {passes} passes"
        total = per * passes * dims.moe_layers
        off_slice = (ep - ep_ici) / (ep - 1)  # share of peers in other slices (DCN)
        ici = total * (1 - off_slice)
        off = ici * mesh.off_domain(("expert",))  # ICI peers beyond this NVLink domain: over the network too
        out.append(Traffic("EP dispatch + combine", ici - off, total * off_slice + off, True, kind))

    f_ici, f_dcn = mesh.ici["fsdp"], mesh.dcn["fsdp"]
    exp_gathered = dims.expert_params() / (ep * mesh.size("tensor")) * w
    other_gathered = dims.other_params() / mesh.size("tensor") * w
    ici_b = dcn_b = 0.0
    if f_ici * f_dcn > 1:
        i, d = _hierarchical(exp_gathered, f_ici, f_dcn, mesh.off_domain(("fsdp",)))
        ici_b, dcn_b = ici_b + i, dcn_b + d
    if f_ici * f_dcn * ep > 1:
        off = mesh.off_domain(("fsdp", "expert"))
        i, d = _hierarchical(other_gathered, f_ici * ep_ici, f_dcn * ep_dcn, off)
        ici_b, dcn_b = ici_b + i, dcn_b + d
    if ici_b or dcn_b:
        out.append(
            Traffic(
                "FSDP all-gather x2 + reduce-scatter",
                3 * ici_b,
                3 * dcn_b,
                False,
                f"weights in {w}-byte weight dtype; experts over fsdp, other weights over fsdp x expert",
            )
        )

    d_ici, d_dcn = mesh.ici["data"], mesh.dcn["data"]
    if d_ici * d_dcn > 1:
        shard = (exp_gathered / (f_ici * f_dcn)) + other_gathered / (f_ici * f_dcn * ep)
        i, d = _hierarchical(shard * d_ici * d_dcn, d_ici, d_dcn, mesh.off_domain(("data",)))
        out.append(Traffic("DP gradient all-reduce", 2 * i, 2 * d, False, "2 x shard x (d-1)/d"))
    return out


@dataclass(frozen=True, slots=True)
class StepModel:
    """The step-time model of one device: FLOPs and the compute, exposed, hidden and edge times (s)."""

    mesh: Mesh
    flops: float
    compute_s: float
    exposed_s: float
    hidden_s: float
    """Overlappable communication time (hidden while it is shorter than compute)."""
    edge_s: float
    """Part of the overlappable time nothing can hide: the first layer's all-gather, the last reduce-scatter."""

    @property
    def step_s(self) -> float:
        """Seconds per step: compute, exposed communication, the edges, and what overlappable communication outlasts
        compute."""
        return self.compute_s + self.exposed_s + self.edge_s + max(0.0, self.hidden_s - self.edge_s - self.compute_s)

    @property
    def tflops_per_device(self) -> float:
        """Achieved TFLOP/s per device at the modelled step time."""
        return self.flops / self.step_s / 1e12


def step_model(dims: Dims, values: Mapping[str, Any], mesh: Mesh, links: Links, compute_tflops: float) -> StepModel:
    """Step time of one device at `compute_tflops` achieved while computing (weak scaling: fixed tokens/device)."""
    flows = traffic(dims, values, mesh)
    flops = dims.train_flops()
    hidden = sum(f.seconds(links) for f in flows if not f.exposed)
    return StepModel(
        mesh,
        flops,
        flops / (compute_tflops * 1e12),
        sum(f.seconds(links) for f in flows if f.exposed),
        hidden,
        # 3 collectives per layer (forward gather, backward gather, reduce-scatter); 2 of 3L are at the edges
        hidden * 2 / (3 * dims.layers),
    )


def scaling(
    dims: Dims, values: Mapping[str, Any], mesh: Mesh, links: Links, compute_tflops: float, gpus: list[int]
) -> list[tuple[StepModel, float]]:
    """The layout grown to each GPU count along DCN FSDP, with weak-scaling efficiency against one slice."""
    base = step_model(dims, values, Mesh(mesh.ici, dict.fromkeys(mesh.dcn, 1), mesh.domain), links, compute_tflops)
    out = []
    for n in gpus:
        if n % mesh.slice_devices:
            raise ValueError(f"{n} GPUs is not a multiple of the {mesh.slice_devices} devices of one slice")
        grown = Mesh(mesh.ici, dict.fromkeys(mesh.dcn, 1), mesh.domain).with_dcn("fsdp", n // mesh.slice_devices)
        model = step_model(dims, values, grown, links, compute_tflops)
        out.append((model, base.step_s / model.step_s))
    return out
