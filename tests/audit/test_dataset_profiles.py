"""The audit report's per-dataset entries, typed (`AuditResult.dataset_profiles`), are the
entries `to_dict` writes: the terminal and HTML reports read the typed ones."""

from eyas.audit import AuditOptions, run_audit

KEYS = {"samples", "quarantined_share", "prompt", "output", "finish_reasons", "at_cap"}
STATS = ["median", "p90", "p99", "max", "mean", "share_under_500", "histogram"]


def test_dataset_profiles_are_the_reports_datasets(toy_tiny, toy_samples):
    result = run_audit(toy_samples, toy_tiny, AuditOptions())
    written = result.to_dict()["datasets"]
    profiles = result.dataset_profiles()
    assert list(profiles) == list(written) and len(written) == 8
    for name, d in written.items():
        assert KEYS <= set(d) <= KEYS | {"source_chars_median", "output_chars_median"}
        p = profiles[name]
        assert (p.samples, p.quarantined_share, p.at_cap) == (
            d["samples"],
            d["quarantined_share"],
            d["at_cap"],
        )
        assert p.finish_reasons == d["finish_reasons"]
        assert p.source_chars_median == d.get("source_chars_median")
        for typed, raw in ((p.prompt, d["prompt"]), (p.output, d["output"])):
            assert list(raw) == STATS
            assert (typed.median, typed.p99, typed.share_under_500) == (
                raw["median"],
                raw["p99"],
                raw["share_under_500"],
            )
            assert list(typed.histogram_counts) == raw["histogram"]["counts"]
            assert list(typed.histogram_edges) == raw["histogram"]["edges"]
