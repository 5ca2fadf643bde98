"""broker/runtime/transport"""
