"""DFlash (arXiv 2602.06036): the block drafter (`model`), its training (`train`), block
decoding (`decode`), its layouts (`export`), its options (`options`) and the method
that ties them (`method.DFlashMethod`)."""
