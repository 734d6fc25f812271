"""DFlash (arXiv 2602.06036): the block drafter, its training, block decoding and layouts."""

from eyas.drafter.dflash.method import DFlashMethod
from eyas.drafter.dflash.model import DFlashConfig, DFlashDrafter

__all__ = ["DFlashConfig", "DFlashDrafter", "DFlashMethod"]
