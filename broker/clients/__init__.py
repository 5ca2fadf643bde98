"""broker/clients"""
