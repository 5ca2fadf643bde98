"""broker/runtime/outbox"""
