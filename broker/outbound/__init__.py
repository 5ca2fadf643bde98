"""broker/outbound"""
