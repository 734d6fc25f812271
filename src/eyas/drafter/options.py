"""Every drafter method's own options, each nested under its method's name (`dflash.block_size`
in a config, `--dflash.block-size` on the command line, a `[dflash]` table in TOML), so two
methods may own options of the same name (`dflash.max_anchors`, `peagle.max_anchors`).
`eyas.train.config.TrainConfig` has these fields and `eyas train` a flag per option. A new
method adds its model here (one field). Light: the configs import it without loading the
methods.

`OLD_KEYS`: the top-level keys (and `--flags`) these options had before they were nested, each
still read as its new key with one `deprecated:` line (`eyas.config_legacy.moved_keys`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from eyas.drafter.dflash.options import DFlashOptions
from eyas.drafter.dflash2.options import DFlash2Options
from eyas.drafter.eagle3.options import Eagle3Options
from eyas.drafter.peagle.options import PEagleOptions


class MethodOptions(BaseModel):
    eagle3: Eagle3Options = Field(
        default_factory=Eagle3Options,
        description="EAGLE-3's options (eagle3, eagle3.1 and peagle read them)",
    )
    dflash: DFlashOptions = Field(
        default_factory=DFlashOptions, description="DFlash's options (dflash and dflash2)"
    )
    dflash2: DFlash2Options = Field(default_factory=DFlash2Options, description="DFlash2's options")
    peagle: PEagleOptions = Field(default_factory=PEagleOptions, description="P-EAGLE's options")


def method_option_keys() -> tuple[str, ...]:
    """Every method option's dotted key (`dflash.block_size`, ...)."""
    return tuple(
        f"{section}.{key}"
        for section, field in MethodOptions.model_fields.items()
        for key in field.annotation.model_fields  # type: ignore[union-attr]
    )


def flag_name(key: str) -> str:
    """The flag of a dotted key: `dflash.block_size` -> `--dflash.block-size`."""
    return "--" + key.replace("_", "-")


# old top-level key -> its dotted key now (moved 2026-12-04, read until eyas 0.3)
OLD_KEYS: dict[str, str] = {
    "draft_head": "eagle3.draft_head",
    "block_size": "dflash.block_size",
    "max_anchors": "dflash.max_anchors",
    "dflash_weighting": "dflash.weighting",
    "dflash_gamma": "dflash.gamma",
    "dpace_alpha": "dflash.dpace_alpha",
    "mask_token_id": "dflash.mask_token_id",
    "conv_kernel_size": "dflash2.conv_kernel_size",
    "conv_group_size": "dflash2.conv_group_size",
    "selector_rank": "dflash2.selector_rank",
    "selector_top_k": "dflash2.selector_top_k",
    "selector_loss_alpha": "dflash2.selector_loss_alpha",
    "peagle_depths": "peagle.depths",
    "peagle_down_sample_ratio": "peagle.down_sample_ratio",
    "peagle_down_sample_ratio_min": "peagle.down_sample_ratio_min",
    "peagle_max_anchors": "peagle.max_anchors",
    "peagle_mask_token_id": "peagle.mask_token_id",
}
