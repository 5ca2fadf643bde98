"""broker/runtime/failures"""
