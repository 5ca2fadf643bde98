"""broker/telemetry"""
