"""Per-device memory estimate of one training step (pure).

What is resident at the peak of the backward pass: parameters, gradients and optimizer states (sharded
over the mesh), FSDP-gathered working copies of a layer's weights, activations each remat policy saves
per layer (on device, or in pinned host memory when offloaded), one layer's recompute working set with
the routed-expert rows the dropless receive buffer implies, and the logits of the loss. docs/plan.md gives
every formula and what has been calibrated against measured peaks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from moekit.plan import te_ep
from moekit.plan.mesh import Mesh
from moekit.plan.model import Dims, dtype_bytes

GIB = 2**30

_QKV = ("query_proj", "value_proj", "key_proj", "kv_proj", "qkv_proj")
_MINIMAL = (*_QKV, "out_proj", "mlpwi_0", "mlpwi_1", "mlpwi", "mlpwo")

# MaxText remat_policy -> (names saved on device, names offloaded to pinned host); the names are MaxText's
# checkpoint_name tags (layers/nnx_decoders.py get_remat_policy, MaxText 0.2.5). "custom" reads the
# per-tensor keys instead.
REMAT_POLICIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "full": ((), ()),
    "minimal": (_MINIMAL, ()),
    "minimal_with_context": ((*_MINIMAL, "context"), ()),
    "minimal_flash": ((*_MINIMAL, "context"), ()),
    "save_dot_with_context_except_mlp": ((*_QKV, "context", "out_proj"), ()),
    "save_dot_except_mlpwi": ((*_QKV, "out_proj", "mlpwo"), ()),
    "save_dot_except_mlp": ((*_QKV, "out_proj"), ()),
    "save_qkv_proj": (_QKV, ()),
    "qkv_proj_offloaded": ((), ("query_proj", "value_proj", "key_proj", "kv_proj")),
    "minimal_offloaded": ((), _MINIMAL),
    "save_out_proj": (("out_proj",), ()),
}

# Tensor keys remat_policy=custom reads (each 'device' | 'remat' | 'offload'; defaults in MaxText's base.yml).
CUSTOM_KEYS = (
    "context", "mlpwi", "mlpwi_0", "mlpwi_1", "mlpwo", "moe_mlpwi_0", "moe_mlpwi_1", "moe_mlpwo", "moe_x_sorted",
    "query_proj", "key_proj", "value_proj", "kv_proj", "qkv_proj", "out_proj", "query_wa_proj", "kv_wa_proj",
    "mla_q", "mla_kv", "attention_out",
)  # fmt: skip

# XLA's defaults when the job's environment does not set them.
JAX_DEFAULT_MEM_FRACTION = 0.75  # XLA_PYTHON_CLIENT_MEM_FRACTION (JAX GPU memory allocation docs)
XLA_DEFAULT_HOST_POOL_GIB = 64  # XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB when unset (the blog raises it to 180)

Place = Literal["device", "host"]
# When an item is live: the whole step, the loss (logits before the layer loop's backward starts), or the
# layer loop's backward (gradient buffers of the scanned layers are allocated when it starts).
Phase = Literal["step", "loss", "layers"]


@dataclass(frozen=True, slots=True)
class Tensor:
    """One activation a decoder layer may keep for the backward pass, in elements per local token."""

    names: tuple[str, ...]
    """checkpoint_name tags on this value (routed-expert outputs carry two)."""
    per_token: float
    """Elements per token of the device's batch."""
    routed: bool = False


@dataclass(frozen=True, slots=True)
class Item:
    """One line of the memory estimate: what it is, its bytes, where (device or pinned host) and when (phase) it is
    live, and how it was computed."""

    name: str
    bytes: float
    place: Place
    how: str
    phase: Phase = "step"


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """The memory estimate of one step: its items, the device and host limits, and the calibration."""

    items: list[Item]
    device_limit: float | None
    """Bytes XLA may allocate per device (HBM x memory fraction); None on CPU."""
    host_limit: float | None
    """Bytes of the pinned-host pool per process; None on CPU."""
    host_physical: float | None
    """Host memory per GPU of the hardware; None when unknown."""
    calibration: float
    """Multiplier applied to the device total (1.0 = uncalibrated)."""
    notes: list[str] = field(default_factory=list)
    te_ep: te_ep.Buffers | None = None
    """The TE MoE block's NCCL EP receive buffers (moe=te), else None."""

    def phase_total(self, phase: Phase) -> float:
        """Device bytes of the items live in `phase`, before calibration."""
        return sum(i.bytes for i in self.items if i.place == "device" and i.phase == phase)

    def total(self, place: Place) -> float:
        """Peak bytes: host items add up; device = whole-step items + the larger of the two phases."""
        if place == "host":
            return sum(i.bytes for i in self.items if i.place == "host")
        peak = self.phase_total("step") + max(self.phase_total("loss"), self.phase_total("layers"))
        return peak * self.calibration

    @property
    def warnings(self) -> list[str]:
        """Why the estimate does not fit: the device limit, the pinned-host pool or the host's memory exceeded, each
        with what to change; empty when it fits."""
        out = []
        dev, host = self.total("device"), self.total("host")
        if self.device_limit is not None and dev > self.device_limit:
            out.append(
                f"will not fit: {dev / GIB:.1f} GiB per device estimated, {self.device_limit / GIB:.1f} GiB usable "
                "(HBM x XLA_PYTHON_CLIENT_MEM_FRACTION); lower train.per_device_batch_size, remat more "
                "(memory.remat_policy), offload activations or shard wider (parallelism.*)"
            )
        if self.host_limit is not None and host > self.host_limit:
            out.append(
                f"offload will not fit: {host / GIB:.1f} GiB pinned host per process, pool {self.host_limit / GIB:.0f} "
                "GiB; raise XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB (hardware.env) or offload fewer tensors"
            )
        if self.host_physical is not None and host > self.host_physical:
            out.append(
                f"offload exceeds the host: {host / GIB:.1f} GiB pinned per GPU, the hardware has "
                f"{self.host_physical / GIB:.0f} GiB of host memory per GPU"
            )
        return out


def routed_rows_per_token(dims: Dims, values: Mapping[str, Any], mesh: Mesh) -> tuple[float, str]:
    """Rows of the routed-expert buffers per local token, and why (MaxText get_ragged_buffer_size)."""
    ep, k = mesh.size("expert"), dims.top_k
    factor = float(values.get("ragged_buffer_factor", -1.0) or -1.0)
    if dims.experts <= 1:
        return 0.0, "no routed experts"
    if not values.get("sparse_matmul", True):
        cf = float(values.get("capacity_factor", -1.0))
        if cf > 0:
            return k * cf, f"capacity path: top_k {k} x capacity_factor {cf:g} (drops what overflows)"
        return float(dims.experts), f"dense dropless: all {dims.experts} experts computed for every token"
    if ep <= 1:
        return float(k), f"top_k {k} (no expert parallelism: every routed row stays local)"
    if values.get("use_ring_of_experts"):
        if factor > 0:
            return k * factor, f"ring of experts: top_k {k} x ragged_buffer_factor {factor:g}"
        return float(k * ep), f"ring of experts: tokens of all {ep} EP ranks gathered, top_k {k} x EP {ep}"
    if factor > 0:
        return k * factor, f"top_k {k} x ragged_buffer_factor {factor:g} (receive capacity; overflow is not dropless)"
    worst = min(ep, dims.experts / k)
    return k * worst, f"top_k {k} x worst case min(EP {ep}, experts/top_k {dims.experts / k:g}) = {worst:g} (dropless)"


def layer_tensors(dims: Dims, moe: bool, rows: float, te_block: bool = False, broadcast: bool = False) -> list[Tensor]:
    """Named activations of one decoder layer, elements per local token.

    TransformerEngine's MoE block applies the top-k weights before the down projection
    (apply_topk_weights_early), so its down-projection output is not kept for the backward. The dense
    dropless path (`broadcast`) multiplies every token by every expert without a sorted copy of the input.
    """
    d = dims
    if d.mla:
        qk = d.qk_nope + d.qk_rope
        attn = [
            Tensor(("kv_wa_proj",), d.kv_lora + d.qk_rope),
            Tensor(("mla_kv",), d.kv_lora),
            Tensor(("query_proj",), d.heads * qk),
            Tensor(("key_proj",), d.heads * qk),
            Tensor(("value_proj",), d.heads * d.v_head),
            Tensor(("context",), d.heads * d.v_head),
            Tensor(("attention_out",), d.heads * d.v_head),
            Tensor(("out_proj",), d.emb),
        ]
        if d.q_lora:
            attn += [Tensor(("query_wa_proj",), d.q_lora), Tensor(("mla_q",), d.q_lora)]
    else:
        attn = [
            Tensor(("query_proj",), d.heads * d.head_dim),
            Tensor(("key_proj",), d.kv_heads * d.head_dim),
            Tensor(("value_proj",), d.kv_heads * d.head_dim),
            Tensor(("context",), d.heads * d.head_dim),
            Tensor(("attention_out",), d.heads * d.head_dim),
            Tensor(("out_proj",), d.emb),
        ]
    if not moe:
        return attn + [Tensor(("mlpwi_0",), d.mlp), Tensor(("mlpwi_1",), d.mlp), Tensor(("mlpwo",), d.emb)]
    shared = d.shared * d.moe_mlp
    out = attn + [
        Tensor(("mlpwi_0",), shared),
        Tensor(("mlpwi_1",), shared),
        Tensor(("mlpwo",), d.emb if shared else 0),
    ]
    if not broadcast:
        out.append(Tensor(("moe_x_sorted",), rows * d.emb, routed=True))
    out += [
        Tensor(("moe_mlpwi_0", "mlpwi_0"), rows * d.moe_mlp, routed=True),
        Tensor(("moe_mlpwi_1", "mlpwi_1"), rows * d.moe_mlp, routed=True),
    ]
    return out if te_block else [*out, Tensor(("moe_mlpwo", "mlpwo"), rows * d.emb, routed=True)]


def tensor_places(values: Mapping[str, Any]) -> tuple[set[str], set[str]]:
    """(names kept on device, names offloaded) for the configured remat policy."""
    policy = str(values.get("remat_policy", "full"))
    if policy == "custom":
        saved = {k for k in CUSTOM_KEYS if values.get(k) == "device"}
        return saved, {k for k in CUSTOM_KEYS if values.get(k) == "offload"}
    if policy not in REMAT_POLICIES:
        raise ValueError(
            f"memory.remat_policy={policy} is not a MaxText remat policy; "
            f"known: {', '.join([*REMAT_POLICIES, 'custom'])}"
        )
    saved, offloaded = REMAT_POLICIES[policy]
    return set(saved), set(offloaded)


def place_of(t: Tensor, saved: set[str], offloaded: set[str]) -> str:
    """The outermost tag that is kept decides (the backward reads the outer value; inner ones are identities)."""
    for name in t.names:
        if name in saved:
            return "device"
        if name in offloaded:
            return "offload"
    return "remat"


def estimate(
    dims: Dims,
    values: Mapping[str, Any],
    mesh: Mesh,
    hbm_gib: float | None = None,
    env: Mapping[str, str] | None = None,
    host_gib_per_gpu: float | None = None,
    calibration: float = 1.0,
) -> MemoryPlan:
    """The memory plan of one device; `values` are MaxText's resolved keys, `env` the job's environment."""
    env = env or {}
    w = dtype_bytes(values.get("weight_dtype", "float32"))
    a = dtype_bytes(values.get("dtype", "bfloat16"))
    mu = dtype_bytes(values.get("mu_dtype") or values.get("weight_dtype", "float32"))
    opt = str(values.get("opt_type", "adamw"))
    ep, fsdp, tp = mesh.size("expert"), mesh.size("fsdp"), mesh.size("tensor")
    t = dims.tokens
    gib = GIB

    # Routed experts are sharded over expert x fsdp x tensor; everything else over fsdp x expert x tensor too
    # (MaxText maps the embed axis onto fsdp and expert). The data axis replicates.
    p_exp = dims.expert_params() / (ep * fsdp * tp)
    p_other = dims.other_params() / (fsdp * ep * tp)
    p_local = p_exp + p_other
    items = [
        Item("parameters", p_local * w, "device", f"{dims.total_params() / 1e9:.3g}B params / shards, {w} B each"),
        Item("gradients", p_local * w, "device", f"same shards, weight dtype ({w} B)", "layers"),
    ]
    states = {"adamw": (mu, w), "adam_pax": (mu, w), "sgd": ()}.get(opt, (mu, w))
    if states:
        items.append(
            Item("optimizer states", p_local * sum(states), "device", f"{opt}: mu {states[0]} B + nu {states[1]} B")
        )

    # One layer's weights after the FSDP all-gather: current + prefetched layer + its unreduced gradient
    # (unsharded weights in the compute dtype are used in place).
    layer_moe = dims.layer_params(True) / tp + dims.experts * dims.mlp_params(dims.moe_mlp) / (ep * tp)
    layer_dense = dims.layer_params(False) / tp
    gathered = max(layer_moe if dims.moe_layers else 0, layer_dense if dims.dense_layers else 0)
    if fsdp * ep > 1:
        items.append(
            Item("gathered layer weights", 3 * gathered * w, "device", "3 x one layer gathered over fsdp", "layers")
        )
    elif w != a:
        items.append(
            Item("compute-dtype weight copy", gathered * a, "device", "one layer cast to the compute dtype", "layers")
        )

    rows, why_rows = routed_rows_per_token(dims, values, mesh)
    te = te_ep.buffers(dims, values, ep, fsdp, mesh.devices)
    if te is not None:  # the TE block reserves its own capacity (plan/te_ep.py), not MaxText's ragged buffer
        rows = te.capacity / t
        why_rows = f"recv_capacity_per_rank, {te_ep.SOURCE}"
    te_block = bool(values.get("te_moe_block"))
    broadcast = not values.get("sparse_matmul", True) and float(values.get("capacity_factor", -1.0)) <= 0
    saved, offloaded = tensor_places(values)
    per_layer = {"device": 0.0, "offload": 0.0}
    listed: dict[str, list[str]] = {"device": [], "offload": []}
    for moe, count in ((False, dims.dense_layers), (True, dims.moe_layers)):
        for tensor in layer_tensors(dims, moe, rows, te_block, broadcast):
            place = place_of(tensor, saved, offloaded)
            if place != "remat" and tensor.per_token:
                per_layer[place] += count * tensor.per_token * t * a
                if tensor.names[0] not in listed[place]:
                    listed[place].append(tensor.names[0])
    carry = dims.layers * t * dims.emb * a
    items.append(Item("layer inputs (scan carry)", carry, "device", f"{dims.layers} layers x tokens x emb"))
    if per_layer["device"]:
        items.append(Item("saved activations", per_layer["device"], "device", ", ".join(listed["device"])))

    # One layer recomputed in the backward: its tensors plus their cotangents.
    tensors = layer_tensors(dims, dims.moe_layers > 0, rows, te_block, broadcast)
    routed = sum(x.per_token for x in tensors if x.routed) * t * a * 2
    other = sum(x.per_token for x in tensors if not x.routed) * t * a * 2
    if routed:
        buffer_rows = rows * t
        items.append(
            Item(
                "TE NCCL EP receive buffer + expert GEMMs" if te else "dropless receive buffer + expert GEMMs",
                routed,
                "device",
                f"{buffer_rows:,.0f} rows ({why_rows}); routed tensors and gradients of one layer",
                "layers",
            )
        )
    items.append(
        Item("layer working set", other, "device", "attention and shared MLP of one layer, with gradients", "layers")
    )
    items.append(
        Item(
            "logits and loss",
            t * dims.vocab * (a + 4 + 4),
            "device",
            f"tokens x vocab {dims.vocab} (dtype + 2 fp32)",
            "loss",
        )
    )
    if per_layer["offload"]:
        items.append(Item("offloaded activations", per_layer["offload"], "host", ", ".join(listed["offload"])))

    notes = te.lines() if te else []
    if hbm_gib is None:
        device_limit = host_limit = None
    else:
        fraction = float(env.get("XLA_PYTHON_CLIENT_MEM_FRACTION", JAX_DEFAULT_MEM_FRACTION))
        device_limit = hbm_gib * gib * fraction
        host_limit = float(env.get("XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB", XLA_DEFAULT_HOST_POOL_GIB)) * gib
        notes.append(f"usable HBM = {hbm_gib:g} GiB x memory fraction {fraction:g}")
    return MemoryPlan(
        items,
        device_limit,
        host_limit,
        host_gib_per_gpu * gib if host_gib_per_gpu else None,
        calibration,
        notes,
        te,
    )
