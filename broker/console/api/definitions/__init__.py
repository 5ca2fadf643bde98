"""broker/console/api/definitions"""
