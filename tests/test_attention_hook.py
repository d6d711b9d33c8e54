"""model.attention=tokamax_mosaic on CPU: translation, the checks before launch, and the hook's wiring.

The kernel itself (tokamax's Pallas Mosaic GPU flash attention) runs only on an NVIDIA GPU: it is timed and checked
against fp32 by benchmarks/attention_survey.py and in training by benchmarks/h200/batch_attention.sh. Here: what
MaxText is handed, what the workers are told, what is refused, and that the hook replaces one method and delegates
the calls it does not take.
"""

from __future__ import annotations

import pytest

from conftest import compose
from moekit import attention
from moekit.attention import hook
from moekit.config.checks import problems
from moekit.translate.job import build

PROXY = "dsv3_proxy_h200"
MOSAIC = ["model.attention=tokamax_mosaic", "~maxtext.extra.attention"]


def _job(experiment: str, overrides):
    return build(compose(experiment, overrides), "/r", "/r/m.jsonl")


def test_maxtext_is_handed_the_carrier_and_the_workers_the_kernel():
    job = _job(PROXY, ["moe=te_gmm", *MOSAIC])
    assert "attention=cudnn_flash_jax" in job.maxtext_args
    assert job.env_dict[attention.ENV] == "tokamax_mosaic"
    plain = _job(PROXY, ["moe=te_gmm"])
    assert attention.ENV not in plain.env_dict and "attention=cudnn_flash_jax" in plain.maxtext_args


def test_the_kernel_passes_the_checks_on_one_hopper_gpu():
    assert problems(compose(PROXY, ["moe=te_gmm", *MOSAIC])) == []


@pytest.mark.parametrize(
    ("experiment", "overrides", "key", "words"),
    [
        ("smoke", ["model.attention=tokamax_mosaic"], "model.attention", "NVIDIA GPUs of SM 80 or newer, hardware=cpu"),
        (
            PROXY,
            [*MOSAIC, "cluster.gpus_per_node=2", "parallelism.ici.fsdp=2"],
            "model.attention",
            "on 2 devices: its Pallas call is not partitioned",
        ),
        (
            PROXY,
            ["model.attention=tokamax_mosaic", "maxtext.extra.attention=dot_product"],
            "maxtext.extra.attention",
            "maxtext.extra.attention=dot_product overrides model.attention=tokamax_mosaic",
        ),
    ],
)
def test_refusals_name_the_key_and_the_reason(experiment, overrides, key, words):
    found = [p for p in problems(compose(experiment, overrides)) if p.key == key]
    assert found and words in found[0].what, problems(compose(experiment, overrides))
    assert found[0].fix


def test_hook_replaces_one_method_once_and_delegates_other_modes(monkeypatch, capsys):
    from maxtext.layers import attention_op

    op = attention_op.AttentionOp
    original = op.cudnn_jax_flash_attention
    calls = []

    def carrier(self, query, key, value, decoder_segment_ids, model_mode="train"):
        calls.append(model_mode)
        return "carrier", None

    monkeypatch.setattr(op, "cudnn_jax_flash_attention", carrier)
    try:
        hook.install("tokamax_mosaic")
        assert hook.MARKER in capsys.readouterr().out
        installed = op.cudnn_jax_flash_attention
        assert installed is not carrier and installed._moekit_real is carrier
        hook.install("tokamax_mosaic")  # a second install wraps the carrier again, not the first wrapper
        assert op.cudnn_jax_flash_attention._moekit_real is carrier
        fake = type("Op", (), {"dropout_rate": 0.0})()
        out = op.cudnn_jax_flash_attention(fake, 1, 2, 3, None, attention_op.MODEL_MODE_AUTOREGRESSIVE)
        assert out == ("carrier", None) and calls == [attention_op.MODEL_MODE_AUTOREGRESSIVE]
        fake.dropout_rate = 0.1
        with pytest.raises(hook.HookError, match="no attention dropout"):
            op.cudnn_jax_flash_attention(fake, 1, 2, 3, None, attention_op.MODEL_MODE_TRAIN)
    finally:
        monkeypatch.setattr(op, "cudnn_jax_flash_attention", original)


def test_hook_refuses_an_unknown_kernel_and_stays_out_without_its_variable():
    with pytest.raises(hook.HookError, match="choose one of tokamax_mosaic"):
        hook.install("flash3")
    assert hook.install_from_env({}) is False and not attention.engaged({})
