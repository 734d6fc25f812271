"""Method names the stages need without loading the methods (configs import this module, so it
imports nothing): the default `--method`, and the method of captures older than `--method`."""

DEFAULT_METHOD = "eagle3"
# captures made before `--method` existed record no method: they were EAGLE-3's layers
CAPTURES_BEFORE_METHOD = "eagle3"
