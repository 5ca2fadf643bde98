"""broker/ingress/routes"""
