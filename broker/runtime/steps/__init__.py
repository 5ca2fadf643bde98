"""broker/runtime/steps"""
