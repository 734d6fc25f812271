"""Each drafter method's own options model (its package's `options` module), the registry
`eyas.train.config.TrainConfig` reads: it has their fields and `eyas train` a flag per field. A
new method adds its model here. Light: the configs import it without loading the methods."""

from __future__ import annotations

from pydantic import BaseModel

from eyas.drafter.dflash.options import DFlashOptions
from eyas.drafter.dflash2.options import DFlash2Options
from eyas.drafter.eagle3.options import Eagle3Options
from eyas.drafter.peagle.options import PEagleOptions

METHOD_OPTIONS: tuple[type[BaseModel], ...] = (
    Eagle3Options,
    DFlashOptions,
    DFlash2Options,
    PEagleOptions,
)
