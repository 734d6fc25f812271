"""The drafter, owned by one `DraftMethod` per method (EAGLE-3/3.1, DFlash): config, layers,
training forward and loss, incremental decoding, export layouts and their loaders. The methods
are named in `eyas.drafter.registry`; the interface is `eyas.drafter.method.DraftMethod`."""
