"""broker/runtime/admin"""
