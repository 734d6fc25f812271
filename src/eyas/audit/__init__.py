"""Audit: checks over samples, a report, and a gate (exit code 1 on any error finding)."""

from eyas.audit.checks import CHECKS
from eyas.audit.context import AuditOptions, Finding
from eyas.audit.data import SampleTable, load_table
from eyas.audit.run import AuditResult, run_audit

__all__ = [
    "CHECKS",
    "AuditOptions",
    "AuditResult",
    "Finding",
    "SampleTable",
    "load_table",
    "run_audit",
]
