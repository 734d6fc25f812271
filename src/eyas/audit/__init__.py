"""Audit: checks over samples, per-sample verdicts with a quarantine, a report, and a gate."""

from eyas.audit.check import CHECKS, Check, Finding, Hit, Systemic
from eyas.audit.context import AuditContext, AuditOptions
from eyas.audit.run import AuditResult, run_audit

__all__ = [
    "CHECKS",
    "AuditContext",
    "AuditOptions",
    "AuditResult",
    "Check",
    "Finding",
    "Hit",
    "Systemic",
    "run_audit",
]
