"""broker/console/api/instances"""
