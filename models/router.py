"""Writes router models (accel-gateway's `platform: "router"`): a config.pbtxt with a
`routing` section and no artifact."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from models.config_text import quote, write_config


@dataclass(frozen=True)
class Variant:
    model: str
    weight: float = 0.0
    # Set: a shadow that gets this share of the router's requests as copies.
    shadow_rate: float | None = None
    rtol: float = 0.0  # 0 and 0: the server's defaults
    atol: float = 0.0


def router_config_text(
    name: str, variants: Sequence[Variant], sticky_key: str = "", max_shadow_in_flight: int = 0
) -> str:
    lines = [f"name: {quote(name)}", 'platform: "router"', "routing {"]
    if sticky_key:
        lines.append(f"  sticky_key: {quote(sticky_key)}")
    if max_shadow_in_flight:
        lines.append(f"  max_shadow_in_flight: {max_shadow_in_flight}")
    for variant in variants:
        lines.append(f"  variant {{ model: {quote(variant.model)}")
        if variant.shadow_rate is None:
            lines.append(f"    weight: {variant.weight:g}")
        else:
            lines.append(
                f"    shadow {{ sample_rate: {variant.shadow_rate:g} rtol: {variant.rtol:g} "
                f"atol: {variant.atol:g} }}"
            )
        lines.append("  }")
    return "\n".join([*lines, "}"]) + "\n"


def write_router(
    repository: Path,
    name: str,
    variants: Sequence[Variant],
    sticky_key: str = "",
    max_shadow_in_flight: int = 0,
) -> Path:
    """Write `<repository>/<name>/config.pbtxt`; the variants are models of the same
    repository."""
    text = router_config_text(name, variants, sticky_key, max_shadow_in_flight)
    return write_config(Path(repository) / name, text)


DIGITS_ROUTER = "digits_router"
# The digits classifier's variants (models.digits_torch, models.compiled): one trained
# network, eager PyTorch, torch.compile and ONNX Runtime taking traffic 2:1:1, TVM as a
# shadow on a quarter of the requests.
DIGITS_PRIMARIES = (("digits_torch_export", 2), ("digits_torch_compile", 1),
                    ("digits_torch_onnx", 1))  # fmt: skip
DIGITS_SHADOW = ("digits_tvm", 0.25)


def build_digits_router(repository: Path, built: Sequence[str]) -> list[str]:
    """Write `digits_router` over those of its variants that were built; none if fewer
    than two were."""
    variants = [Variant(name, weight) for name, weight in DIGITS_PRIMARIES if name in built]
    shadow, rate = DIGITS_SHADOW
    if shadow in built:
        variants.append(Variant(shadow, shadow_rate=rate))
    if not variants or variants[0].shadow_rate is not None or len(variants) < 2:
        return []
    write_router(repository, DIGITS_ROUTER, variants)
    return [DIGITS_ROUTER]
