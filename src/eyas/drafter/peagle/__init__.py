"""P-EAGLE (parallel drafting EAGLE, arXiv 2602.01469): an EAGLE-3 drafter that drafts all K
positions in one forward (`model`), its COD-sampled training (`train`), parallel decoding
(`decode`), the vLLM layout (`export`), its options (`options`) and the method that ties them
(`method.PEagleMethod`)."""
