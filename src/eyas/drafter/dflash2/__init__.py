"""DFlash2: DFlash's block drafter with grouped dynamic convolutions and a candidate selector
(`docs/dflash2.md`): the drafter (`model`), its training (`train`), selector decoding
(`decode`), layouts (`export`), options (`options`) and the method (`method.DFlash2Method`)."""
