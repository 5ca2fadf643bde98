"""broker/cli"""
