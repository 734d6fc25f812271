"""EAGLE-3 and EAGLE-3.1: the model (`model`), its TTT training (`train`), incremental decoding
(`decode`), its layouts (`export`, `export_mla`), its options (`options`) and the method that
ties them (`method.Eagle3Method`)."""
