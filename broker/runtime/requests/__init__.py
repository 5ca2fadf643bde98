"""broker/runtime/requests"""
